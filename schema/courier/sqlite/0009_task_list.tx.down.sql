DROP INDEX courier_tasks_created;
