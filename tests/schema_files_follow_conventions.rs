//! The `.avsc` files follow the conventions downstream tools rely on (DESIGN §6): docs on
//! everything, `["null", T]` optionals defaulting to null, enums with an UNKNOWN default,
//! millisecond timestamps, and shared named types defined identically in every file.

mod support;

use std::{collections::BTreeMap, fs};

use serde_json::Value as Json;

const NAMESPACE: &str = "io.kubefacts.v1";
/// A type new with a major version of its topic (`job-runs.v2`) takes that version's
/// namespace; the types it shares with v1 files keep theirs.
const NAMESPACES: [&str; 2] = [NAMESPACE, "io.kubefacts.v2"];

fn schema_files() -> Vec<(String, Json)> {
    let mut files = Vec::new();
    let root = support::repo_path("schemas");
    let mut paths: Vec<_> = fs::read_dir(&root).unwrap().map(|e| e.unwrap().path()).collect();
    for dir in fs::read_dir(format!("{root}/revisions")).unwrap() {
        paths.extend(fs::read_dir(dir.unwrap().path()).unwrap().map(|e| e.unwrap().path()));
    }
    paths.sort();
    for p in paths.into_iter().filter(|p| p.extension().is_some_and(|e| e == "avsc")) {
        let text = fs::read_to_string(&p).unwrap();
        let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        files.push((p.strip_prefix(&root).unwrap().display().to_string(), json));
    }
    assert!(files.len() >= 11, "found only {} schema files", files.len());
    files
}

/// Walks a schema, calling `visit(path, node)` on every JSON object that is a type or field.
fn walk(node: &Json, path: &str, ns: &str, visit: &mut dyn FnMut(&str, &str, &Json)) {
    match node {
        Json::Array(branches) => branches.iter().for_each(|b| walk(b, path, ns, visit)),
        Json::Object(o) => {
            let ns = o.get("namespace").and_then(Json::as_str).unwrap_or(ns);
            visit(path, ns, node);
            match o.get("type").and_then(Json::as_str) {
                Some("record") => {
                    let name = o["name"].as_str().unwrap();
                    for f in o["fields"].as_array().unwrap() {
                        visit(&format!("{path}.{name}"), ns, f);
                        walk(
                            &f["type"],
                            &format!("{path}.{name}.{}", f["name"].as_str().unwrap()),
                            ns,
                            visit,
                        );
                    }
                }
                Some("array") => walk(&o["items"], path, ns, visit),
                Some("map") => walk(&o["values"], path, ns, visit),
                _ => {}
            }
        }
        _ => {}
    }
}

fn problems_of(file: &str, schema: &Json) -> Vec<String> {
    let mut problems = Vec::new();
    walk(schema, file, NAMESPACE, &mut |path, ns, node| {
        let kind = node.get("type").and_then(Json::as_str).unwrap_or("");
        let named = matches!(kind, "record" | "enum" | "fixed");
        let is_field = node.get("name").is_some() && !named;
        if (is_field || named) && node.get("doc").and_then(Json::as_str).is_none_or(|d| d.trim().is_empty()) {
            problems.push(format!("{path}: {} has no doc", node["name"]));
        }
        if named && !NAMESPACES.contains(&ns) {
            problems.push(format!("{path}: {} is in namespace {ns}", node["name"]));
        }
        if kind == "enum" {
            let symbols = node["symbols"].as_array().unwrap();
            if symbols.first() != Some(&Json::from("UNKNOWN"))
                || node.get("default") != Some(&Json::from("UNKNOWN"))
            {
                problems.push(format!("{path}: enum {} needs UNKNOWN first and as default", node["name"]));
            }
        }
        if is_field
            && let Json::Array(branches) = &node["type"]
            && (branches.first() != Some(&Json::from("null")) || node.get("default") != Some(&Json::Null))
        {
            problems.push(format!("{path}.{}: unions are [\"null\", T] with default null", node["name"]));
        }
        if let Some(lt) = node.get("logicalType").and_then(Json::as_str)
            && !matches!(lt, "timestamp-millis" | "uuid")
        {
            problems.push(format!("{path}: logical type {lt} (only timestamp-millis and uuid)"));
        }
    });
    problems
}

#[test]
fn every_record_field_and_enum_is_documented_and_conventional() {
    let problems: Vec<_> = schema_files().iter().flat_map(|(f, s)| problems_of(f, s)).collect();
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_convention_check_catches_a_missing_doc_and_a_bad_union() {
    let (file, mut schema) = schema_files().remove(0);
    schema["fields"][0].as_object_mut().unwrap().remove("doc");
    schema["fields"][1]["type"] = serde_json::json!(["long", "null"]);
    let problems = problems_of(&file, &schema);
    assert_eq!(problems.len(), 2, "{problems:#?}");
}

#[test]
fn shared_named_types_are_identical_in_every_file() {
    let mut seen: BTreeMap<String, (String, Json)> = BTreeMap::new();
    let mut problems = Vec::new();
    for (file, schema) in schema_files().iter().filter(|(f, _)| !f.starts_with("revisions")) {
        walk(schema, file, NAMESPACE, &mut |_, ns, node| {
            let kind = node.get("type").and_then(Json::as_str).unwrap_or("");
            if matches!(kind, "record" | "enum" | "fixed") {
                let full = format!("{ns}.{}", node["name"].as_str().unwrap());
                match seen.get(&full) {
                    Some((first, def)) if def != node => {
                        problems.push(format!("{full}: {file} differs from {first}"))
                    }
                    Some(_) => {}
                    None => {
                        seen.insert(full, (file.clone(), node.clone()));
                    }
                }
            }
        });
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(seen.contains_key("io.kubefacts.v1.Source") && seen.contains_key("io.kubefacts.v1.ObjectMeta"));
}

#[test]
fn no_schema_carries_fields_the_watcher_must_never_ship() {
    const FORBIDDEN: [&str; 7] = ["env", "args", "command", "volumes", "secret", "message", "image"];
    for (file, schema) in schema_files() {
        walk(&schema, &file, NAMESPACE, &mut |path, _, node| {
            if let Some(name) = node.get("name").and_then(Json::as_str) {
                assert!(!FORBIDDEN.contains(&name), "{path}: field {name} must never leave the watcher");
            }
        });
    }
}

/// Words reserved (usable as a column name only quoted) in the SQL dialects warehouse
/// sinks write to: PostgreSQL 17 (Appendix C, "reserved" and "reserved (can be function or
/// type)"), MySQL 8.4 (R), SQL Server 2022, BigQuery and Snowflake. Non-reserved key
/// words (`name`, `type`, `state`, `value` in most of them) are not listed.
const SQL_RESERVED: &[&str] = &[
    // PostgreSQL
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "authorization",
    "binary",
    "both",
    "case",
    "cast",
    "check",
    "collate",
    "collation",
    "column",
    "concurrently",
    "constraint",
    "create",
    "cross",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "false",
    "fetch",
    "for",
    "foreign",
    "freeze",
    "from",
    "full",
    "grant",
    "group",
    "having",
    "ilike",
    "in",
    "initially",
    "inner",
    "intersect",
    "into",
    "is",
    "isnull",
    "join",
    "lateral",
    "leading",
    "left",
    "like",
    "limit",
    "localtime",
    "localtimestamp",
    "natural",
    "not",
    "notnull",
    "null",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "outer",
    "overlaps",
    "placing",
    "primary",
    "references",
    "returning",
    "right",
    "select",
    "session_user",
    "similar",
    "some",
    "symmetric",
    "system_user",
    "table",
    "tablesample",
    "then",
    "to",
    "trailing",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "variadic",
    "verbose",
    "when",
    "where",
    "window",
    "with",
    // MySQL (beyond the above)
    "accessible",
    "add",
    "alter",
    "before",
    "between",
    "bigint",
    "blob",
    "by",
    "call",
    "cascade",
    "change",
    "char",
    "character",
    "condition",
    "continue",
    "convert",
    "cube",
    "cume_dist",
    "current",
    "cursor",
    "database",
    "databases",
    "day_hour",
    "day_microsecond",
    "day_minute",
    "day_second",
    "dec",
    "decimal",
    "declare",
    "delayed",
    "delete",
    "dense_rank",
    "describe",
    "deterministic",
    "distinctrow",
    "div",
    "double",
    "drop",
    "dual",
    "each",
    "elseif",
    "empty",
    "enclosed",
    "escaped",
    "exists",
    "exit",
    "explain",
    "first_value",
    "float",
    "float4",
    "float8",
    "force",
    "fulltext",
    "function",
    "generated",
    "get",
    "groups",
    "grouping",
    "high_priority",
    "hour_microsecond",
    "hour_minute",
    "hour_second",
    "if",
    "ignore",
    "index",
    "infile",
    "inout",
    "insensitive",
    "insert",
    "int",
    "int1",
    "int2",
    "int3",
    "int4",
    "int8",
    "integer",
    "intersect",
    "interval",
    "io_after_gtids",
    "io_before_gtids",
    "iterate",
    "json_table",
    "key",
    "keys",
    "kill",
    "lag",
    "last_value",
    "lead",
    "leave",
    "linear",
    "lines",
    "load",
    "lock",
    "long",
    "longblob",
    "longtext",
    "loop",
    "low_priority",
    "master_bind",
    "match",
    "maxvalue",
    "mediumblob",
    "mediumint",
    "mediumtext",
    "middleint",
    "minute_microsecond",
    "minute_second",
    "mod",
    "modifies",
    "no_write_to_binlog",
    "nth_value",
    "ntile",
    "numeric",
    "of",
    "optimize",
    "optimizer_costs",
    "option",
    "optionally",
    "out",
    "outfile",
    "over",
    "partition",
    "percent_rank",
    "precision",
    "procedure",
    "purge",
    "range",
    "rank",
    "read",
    "reads",
    "read_write",
    "real",
    "recursive",
    "regexp",
    "release",
    "rename",
    "repeat",
    "replace",
    "require",
    "resignal",
    "restrict",
    "return",
    "revoke",
    "rlike",
    "row",
    "rows",
    "row_number",
    "schema",
    "schemas",
    "second_microsecond",
    "sensitive",
    "separator",
    "set",
    "show",
    "signal",
    "smallint",
    "spatial",
    "specific",
    "sql",
    "sqlexception",
    "sqlstate",
    "sqlwarning",
    "sql_big_result",
    "sql_calc_found_rows",
    "sql_small_result",
    "ssl",
    "starting",
    "stored",
    "straight_join",
    "system",
    "terminated",
    "tinyblob",
    "tinyint",
    "tinytext",
    "trigger",
    "undo",
    "unlock",
    "unsigned",
    "update",
    "usage",
    "use",
    "utc_date",
    "utc_time",
    "utc_timestamp",
    "values",
    "varbinary",
    "varchar",
    "varcharacter",
    "varying",
    "virtual",
    "while",
    "write",
    "xor",
    "year_month",
    "zerofill",
    // SQL Server (beyond the above)
    "backup",
    "begin",
    "break",
    "browse",
    "bulk",
    "checkpoint",
    "close",
    "clustered",
    "coalesce",
    "commit",
    "compute",
    "containstable",
    "contains",
    "dbcc",
    "deallocate",
    "deny",
    "disk",
    "distributed",
    "dump",
    "errlvl",
    "escape",
    "exec",
    "execute",
    "external",
    "file",
    "fillfactor",
    "freetext",
    "freetexttable",
    "goto",
    "holdlock",
    "identity",
    "identity_insert",
    "identitycol",
    "kill",
    "lineno",
    "merge",
    "national",
    "nocheck",
    "nonclustered",
    "nullif",
    "off",
    "offsets",
    "open",
    "opendatasource",
    "openquery",
    "openrowset",
    "openxml",
    "percent",
    "pivot",
    "plan",
    "print",
    "proc",
    "public",
    "raiserror",
    "readtext",
    "reconfigure",
    "replication",
    "restore",
    "revert",
    "rollback",
    "rowcount",
    "rowguidcol",
    "rule",
    "save",
    "securityaudit",
    "semantickeyphrasetable",
    "setuser",
    "shutdown",
    "statistics",
    "textsize",
    "top",
    "tran",
    "transaction",
    "truncate",
    "try_convert",
    "tsequal",
    "unpivot",
    "updatetext",
    "view",
    "waitfor",
    "writetext",
    // BigQuery (beyond the above)
    "assert_rows_modified",
    "collate",
    "define",
    "enum",
    "exclude",
    "following",
    "hash",
    "lookup",
    "new",
    "no",
    "nulls",
    "preceding",
    "proto",
    "qualify",
    "respect",
    "rollup",
    "struct",
    "treat",
    "unbounded",
    "unnest",
    "within",
    // Snowflake (beyond the above)
    "account",
    "connect",
    "connection",
    "gscluster",
    "increment",
    "issue",
    "minus",
    "organization",
    "sample",
    "start",
    "try_cast",
    "whenever",
];

#[test]
fn no_field_is_named_by_a_reserved_word_of_a_common_sql_dialect() {
    let mut bad = Vec::new();
    for (file, schema) in schema_files().iter().filter(|(f, _)| !f.starts_with("revisions")) {
        walk(schema, file, NAMESPACE, &mut |path, _, node| {
            // Fields (a `name` beside a `type` that is not a named-type definition).
            let is_field =
                node.get("type").is_some_and(|t| !matches!(t.as_str(), Some("record" | "enum" | "fixed")));
            if let (true, Some(name)) = (is_field, node.get("name").and_then(Json::as_str))
                && SQL_RESERVED.contains(&name.to_ascii_lowercase().as_str())
            {
                bad.push(format!("{path}.{name}"));
            }
        });
    }
    assert!(bad.is_empty(), "fields a warehouse can only name quoted (rename them with an alias): {bad:?}");
    // The check can fail: the frozen first revision of coverage-alert has `from` and `to`.
    let (_, r1) = schema_files().into_iter().find(|(f, _)| f == "revisions/coverage-alert/r1.avsc").unwrap();
    let mut found = Vec::new();
    walk(&r1, "r1", NAMESPACE, &mut |_, _, node| {
        if let Some(name) = node.get("name").and_then(Json::as_str).filter(|n| SQL_RESERVED.contains(n)) {
            found.push(name.to_owned());
        }
    });
    assert_eq!(found, ["from", "to"]);
}
