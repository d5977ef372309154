DROP TABLE IF EXISTS courier_biz_types;
