//! Edits of a TOML document shared by the `VIGIL_*` overrides and the `check-config` output,
//! kept apart so both can lay values over a document the same way.

/// Deep-merges `over` into `base`: tables key by key, anything else replaced.
pub(super) fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The table at `key` of `doc`, created (or replacing a non-table) when missing.
pub(super) fn table_mut<'a>(doc: &'a mut toml::Table, key: &str) -> &'a mut toml::Table {
    let entry = doc.entry(key.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if !entry.is_table() {
        *entry = toml::Value::Table(toml::Table::new());
    }
    match entry {
        toml::Value::Table(t) => t,
        _ => unreachable!("replaced by a table above"),
    }
}
