//! KfUpgrade decisions (pure): which components move, in what order, from and to which versions,
//! and whether each move is allowed by the component's release edges.

use std::collections::{BTreeMap, VecDeque};

use component_framework::{Component, Release};
use kubeflow_crds::component::ComponentKind;
use kubeflow_crds::kfupgrade::{KfUpgradeSpec, StepPhase, UpgradeStep};

use crate::distribution;

/// Built-in releases (oldest first) of `component`.
pub fn releases(component: ComponentKind) -> &'static [Release] {
    match component {
        ComponentKind::Istio => istio_operator::IstioComponent::releases(),
        ComponentKind::Dex => dex_operator::DexComponent::releases(),
        ComponentKind::KFServing => kfserving_operator::KFServingComponent::releases(),
        ComponentKind::Katib => katib_operator::KatibComponent::releases(),
        ComponentKind::Pipelines => pipelines_operator::PipelinesComponent::releases(),
    }
}

/// Shortest chain of direct upgrades from `from` to `to`.
pub fn path(component: ComponentKind, from: &str, to: &str) -> Option<Vec<String>> {
    let releases = releases(component);
    let mut previous: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    while let Some(at) = queue.pop_front() {
        if at == to {
            let mut chain = vec![to.to_string()];
            let mut cur = to;
            while let Some(p) = previous.get(cur) {
                chain.push(p.to_string());
                cur = p;
            }
            chain.reverse();
            return Some(chain);
        }
        for next in releases.iter().filter(|r| r.upgrades_from.contains(&at)) {
            if next.version != from && !previous.contains_key(next.version) {
                previous.insert(next.version, at);
                queue.push_back(next.version);
            }
        }
    }
    None
}

/// Why an upgrade is refused: which component, which versions, what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

/// The steps of `spec` for a KfDef whose components run `current` (component → version).
pub fn steps(spec: &KfUpgradeSpec, current: &BTreeMap<ComponentKind, String>) -> Result<Vec<UpgradeStep>, Refusal> {
    let release_targets = match &spec.new_kf_def.version {
        Some(v) => Some(distribution::component_versions(v).map_err(|e| Refusal(e.to_string().replace("spec.version", "spec.newKfDef.version")))?),
        None => None,
    };
    let explicit: BTreeMap<ComponentKind, &str> = spec.components.iter().map(|c| (c.component, c.version.as_str())).collect();
    for component in explicit.keys() {
        if !current.contains_key(component) {
            return Err(Refusal(format!("spec.components: {component} is not part of KfDef {:?}", spec.current_kf_def.name)));
        }
    }
    let mut order: Vec<ComponentKind> = spec.order.clone();
    order.extend(ComponentKind::upgrade_order().into_iter().filter(|c| !spec.order.contains(c)));
    let mut steps = Vec::new();
    for component in order.into_iter().filter(|c| current.contains_key(c)) {
        if spec.only_listed && !explicit.contains_key(&component) {
            continue;
        }
        let from = current[&component].clone();
        let to = match (explicit.get(&component), &release_targets) {
            (Some(v), _) => v.to_string(),
            (None, Some(targets)) => match targets.get(&component) {
                Some(v) => v.clone(),
                None => continue,
            },
            (None, None) => continue,
        };
        if from == to {
            continue;
        }
        let shipped = releases(component);
        let index = |v: &str| shipped.iter().position(|r| r.version == v);
        let versions = || shipped.iter().map(|r| r.version).collect::<Vec<_>>().join(", ");
        let Some(to_index) = index(&to) else {
            return Err(Refusal(format!("{component}: version {to} is not shipped; shipped versions: {}", versions())));
        };
        if index(&from).is_some_and(|f| to_index < f) {
            return Err(Refusal(format!("{component}: {from} → {to} is a downgrade, which KfUpgrade does not do; versions after {from}: {}", shipped[index(&from).unwrap() + 1..].iter().map(|r| r.version).collect::<Vec<_>>().join(", "))));
        }
        if !shipped[to_index].upgrades_from.contains(&from.as_str()) {
            let allowed = match path(component, &from, &to) {
                Some(chain) => format!("allowed path: {}, one KfUpgrade per step", chain.join(" → ")),
                None => format!("{to} can be reached from: {}", shipped[to_index].upgrades_from.join(", ")),
            };
            return Err(Refusal(format!("{component}: cannot upgrade from {from} to {to} directly; {allowed}")));
        }
        steps.push(UpgradeStep { component, from_version: from, to_version: to, phase: StepPhase::Pending, start_time: None, end_time: None, message: String::new() });
    }
    if steps.is_empty() {
        return Err(Refusal("nothing to upgrade: every component already runs its target version".into()));
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_crds::kfupgrade::KfUpgrade;

    fn spec(yaml: &str) -> KfUpgradeSpec {
        let full = format!("apiVersion: kfupgrade.apps.kubeflow.org/v1alpha1\nkind: KfUpgrade\nmetadata: {{name: u}}\nspec:\n{yaml}");
        serde_yaml::from_str::<KfUpgrade>(&full).unwrap().spec
    }

    fn v12() -> BTreeMap<ComponentKind, String> {
        distribution::component_versions("v1.2.0").unwrap()
    }

    #[test]
    fn release_upgrade_moves_every_component_in_dependency_order() {
        let steps = steps(&spec("  currentKfDef: {name: kf, version: v1.2.0}\n  newKfDef: {name: kf, version: v1.3.0}\n"), &v12()).unwrap();
        let order: Vec<_> = steps.iter().map(|s| s.component).collect();
        assert_eq!(order, [ComponentKind::Istio, ComponentKind::Dex, ComponentKind::KFServing, ComponentKind::Katib, ComponentKind::Pipelines]);
        let katib = steps.iter().find(|s| s.component == ComponentKind::Katib).unwrap();
        assert_eq!((katib.from_version.as_str(), katib.to_version.as_str()), ("v0.10.0", "v0.11.0"));
    }

    #[test]
    fn order_and_subset_are_honoured() {
        let s = spec("  currentKfDef: {name: kf}\n  newKfDef: {name: kf, version: v1.3.0}\n  order: [katib, istio]\n  components: [{component: katib, version: v0.11.0}]\n  onlyListed: true\n");
        let steps = steps(&s, &v12()).unwrap();
        assert_eq!(steps.iter().map(|s| s.component).collect::<Vec<_>>(), [ComponentKind::Katib]);
        let s = spec("  currentKfDef: {name: kf}\n  newKfDef: {name: kf, version: v1.3.0}\n  order: [pipelines]\n");
        assert_eq!(steps_of(&s)[0], ComponentKind::Pipelines);
    }

    fn steps_of(s: &KfUpgradeSpec) -> Vec<ComponentKind> {
        steps(s, &v12()).unwrap().iter().map(|s| s.component).collect()
    }

    #[test]
    fn downgrades_unknown_versions_and_unsupported_releases_are_refused_with_the_reason() {
        let mut current = v12();
        current.insert(ComponentKind::Katib, "v0.11.0".into());
        let err = steps(&spec("  currentKfDef: {name: kf}\n  newKfDef: {name: kf}\n  components: [{component: katib, version: v0.10.0}]\n"), &current).unwrap_err().0;
        assert!(err.contains("katib") && err.contains("v0.11.0 → v0.10.0") && err.contains("downgrade"), "{err}");
        let err = steps(&spec("  currentKfDef: {name: kf}\n  newKfDef: {name: kf}\n  components: [{component: dex, version: v9.9.9}]\n"), &v12()).unwrap_err().0;
        assert!(err.contains("dex") && err.contains("v2.22.0, v2.24.0"), "{err}");
        let err = steps(&spec("  currentKfDef: {name: kf}\n  newKfDef: {name: kf, version: v2.0.0}\n"), &v12()).unwrap_err().0;
        assert!(err.contains("spec.newKfDef.version") && err.contains("v1.3.x"), "{err}");
    }

    #[test]
    fn paths_follow_the_release_edges() {
        assert_eq!(path(ComponentKind::Katib, "v0.10.0", "v0.11.0").unwrap(), ["v0.10.0", "v0.11.0"]);
        assert_eq!(path(ComponentKind::Katib, "v0.11.0", "v0.10.0"), None);
    }
}
