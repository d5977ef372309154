DROP TABLE IF EXISTS courier_task_slot_holds;
