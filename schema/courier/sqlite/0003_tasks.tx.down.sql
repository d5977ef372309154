DROP TABLE IF EXISTS courier_tasks;
DROP TABLE IF EXISTS courier_task_heads;
DROP TABLE IF EXISTS courier_task_queues;
