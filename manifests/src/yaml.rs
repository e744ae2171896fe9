//! Kustomization files read as kustomize v3 reads them: a key given twice in one mapping takes its
//! last value (go-yaml v2 fills a map entry by entry), where `serde_yaml_ng` refuses the document.
//! kfctl's own packages have such files (kubeflow/manifests v1.2.0's
//! `jupyter/jupyter-web-app/base_v3/kustomization.yaml` lists `commonLabels` twice), and what the
//! reference check reads must be what kustomize uses: the last value. (kustomize v5 refuses such a
//! file itself.)

use std::fmt;

use serde::de::{Deserialize, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor};
use serde_yaml_ng::value::{Tag, TaggedValue};
use serde_yaml_ng::{Mapping, Value};

/// Parses one YAML document; a repeated key keeps its last value, at any depth.
pub fn parse(text: &str) -> Result<Value, serde_yaml_ng::Error> {
    serde_yaml_ng::from_str::<LastWins>(text).map(|v| v.0)
}

struct LastWins(Value);

impl<'de> Deserialize<'de> for LastWins {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(LastWinsVisitor).map(LastWins)
    }
}

struct LastWinsVisitor;

impl<'de> Visitor<'de> for LastWinsVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_string()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        LastWins::deserialize(deserializer).map(|v| v.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(LastWins(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Sequence(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut mapping = Mapping::new();
        while let Some((LastWins(key), LastWins(value))) = map.next_entry()? {
            // `insert` replaces an earlier value of the key: the last one wins.
            mapping.insert(key, value);
        }
        Ok(Value::Mapping(mapping))
    }

    /// A tagged value (`!tag value`).
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        let (tag, variant): (String, _) = data.variant()?;
        let LastWins(value) = variant.newtype_variant()?;
        Ok(Value::Tagged(Box::new(TaggedValue { tag: Tag::new(tag), value })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_keeps_its_last_value_at_any_depth() {
        let doc = parse("commonLabels: {app: a}\nresources: [x.yaml]\ncommonLabels: {app: b}\nimages:\n- {name: i, newTag: '1', newTag: '2'}\n").unwrap();
        assert_eq!(doc["commonLabels"]["app"], Value::String("b".into()));
        assert_eq!(doc["images"][0]["newTag"], Value::String("2".into()));
        assert_eq!(doc["resources"][0], Value::String("x.yaml".into()));
        assert_eq!(doc.as_mapping().unwrap().len(), 3, "one entry per key");
    }

    #[test]
    fn documents_without_repeated_keys_read_as_serde_yaml_reads_them() {
        let text = "a: 1\nb: [true, null, 2.5, -3, 'x']\nc: {d: ~}\ne: !Tagged {f: g}\n";
        assert_eq!(parse(text).unwrap(), serde_yaml_ng::from_str::<Value>(text).unwrap());
        assert!(parse("a: [1\n").is_err());
    }
}
