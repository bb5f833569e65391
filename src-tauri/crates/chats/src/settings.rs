//! App settings: JSON values under string keys.

use rusqlite::{params, OptionalExtension};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::Store;

impl Store {
    /// The value stored under `key`, or `None` if it was never set.
    pub fn get_setting<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        let json: Option<String> = self.with("reading a setting", |inner| {
            Ok(inner
                .conn
                .query_row("SELECT value FROM settings WHERE key = ?", [key], |row| {
                    row.get(0)
                })
                .optional()?)
        })?;
        json.map(|json| serde_json::from_str(&json))
            .transpose()
            .map_err(|source| Error::Setting {
                key: key.to_owned(),
                source,
            })
    }

    /// Stores `value` under `key`, replacing any previous value.
    pub fn set_setting<T: Serialize + ?Sized>(&self, key: &str, value: &T) -> Result<()> {
        let json = serde_json::to_string(value).map_err(|source| Error::Setting {
            key: key.to_owned(),
            source,
        })?;
        self.with("saving a setting", |inner| {
            inner.conn.execute(
                "INSERT INTO settings (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![key, json],
            )?;
            Ok(())
        })
    }

    /// Forgets the value under `key`; returns whether there was one.
    pub fn remove_setting(&self, key: &str) -> Result<bool> {
        self.with("removing a setting", |inner| {
            Ok(inner
                .conn
                .execute("DELETE FROM settings WHERE key = ?", [key])?
                > 0)
        })
    }
}
