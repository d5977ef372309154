-- Server-side secrets courier generates for itself (the key that seals list page tokens).
CREATE TABLE IF NOT EXISTS courier_settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
