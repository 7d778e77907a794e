//! Deterministic sample values for any record schema, so every schema is exercised end to
//! end without hand-written fixtures that drift from the `.avsc` files.

use std::collections::HashMap;

use apache_avro::{
    Schema, Uuid,
    schema::{Name, ResolvedSchema},
    types::Value,
};

/// A value of `schema` that fills every field. `seed` varies the values and, for
/// `seed % 3 == 0`, takes the null branch of optional fields and empties arrays and maps.
pub fn sample(schema: &Schema, seed: u64) -> Value {
    let resolved = ResolvedSchema::try_from(schema).expect("schema resolves");
    let names: HashMap<Name, Schema> =
        resolved.get_names().iter().map(|(n, s)| (n.clone(), (*s).clone())).collect();
    fill(schema, &names, seed, 0)
}

fn fill(schema: &Schema, names: &HashMap<Name, Schema>, seed: u64, depth: u64) -> Value {
    let sparse = seed.is_multiple_of(3);
    let n = seed.wrapping_mul(31).wrapping_add(depth);
    match schema {
        Schema::Null => Value::Null,
        Schema::Boolean => Value::Boolean(!n.is_multiple_of(2)),
        Schema::Int => Value::Int((n % 1000) as i32 - 1),
        Schema::Long => Value::Long(n as i64 * 1_000_003),
        Schema::Float => Value::Float(n as f32 + 0.5),
        Schema::Double => Value::Double(n as f64 + 0.25),
        Schema::Bytes => Value::Bytes(vec![0xC3, 0x01, n as u8]),
        Schema::String => Value::String(format!("s-{n}-\u{e9}\u{1F680}")),
        Schema::Uuid(_) => {
            Value::Uuid(Uuid::from_u128(0x6f1c9a52_3d2e_4b8e_9a51_0c7f7d3f2a10 ^ u128::from(n)))
        }
        Schema::TimestampMillis => Value::TimestampMillis(1_795_946_400_250 + n as i64 * 1000),
        Schema::Array(a) => Value::Array(if sparse {
            vec![]
        } else {
            (0..2).map(|i| fill(&a.items, names, seed + i, depth + 1)).collect()
        }),
        // One entry: apache-avro's `Value::Map` is a HashMap, so two entries would encode
        // in a different order per process and byte-exact golden files could not hold.
        // (Typed records use BTreeMap and encode deterministically.)
        Schema::Map(m) => Value::Map(if sparse {
            HashMap::new()
        } else {
            HashMap::from([("k0".to_owned(), fill(&m.types, names, seed, depth + 1))])
        }),
        Schema::Union(u) => {
            let variants = u.variants();
            let idx = if sparse && variants[0] == Schema::Null {
                0
            } else {
                variants.iter().position(|v| *v != Schema::Null).unwrap_or(0)
            };
            Value::Union(idx as u32, Box::new(fill(&variants[idx], names, seed, depth + 1)))
        }
        Schema::Record(r) => Value::Record(
            r.fields
                .iter()
                .enumerate()
                .map(|(i, f)| (f.name.clone(), fill(&f.schema, names, seed, depth * 7 + i as u64 + 1)))
                .collect(),
        ),
        Schema::Enum(e) => {
            // Skip UNKNOWN (index 0): writers never write the reader-side default.
            let i = if e.symbols.len() > 1 { 1 + (n as usize % (e.symbols.len() - 1)) } else { 0 };
            Value::Enum(i as u32, e.symbols[i].clone())
        }
        Schema::Ref { name } => fill(names.get(name).expect("named type defined"), names, seed, depth),
        other => panic!("sample() does not cover {other:?}; the schemas should not use it"),
    }
}
