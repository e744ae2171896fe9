//! Condition bookkeeping shared by every status the operators write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kubeflow_crds::common::{Condition, ConditionStatus};

/// The longest condition message kept, in bytes. Messages sum up lists that grow with what they
/// cover (a fleet's clusters, an upgrade's failures): cut, one cannot push its resource's status
/// past what the API server stores.
pub const MESSAGE_MAX: usize = 8 * 1024;

/// Sets condition `type_`, keeping `lastTransitionTime` unless the status flips. The message is
/// cut to [`MESSAGE_MAX`] bytes.
pub fn set_condition(conditions: &mut Vec<Condition>, type_: &str, status: ConditionStatus, reason: &str, message: &str, generation: Option<i64>, now: &Time) {
    let message = crate::cut_to(message.to_string(), MESSAGE_MAX);
    let message = message.as_str();
    let existing = conditions.iter_mut().find(|c| c.type_ == type_);
    match existing {
        Some(c) if c.status == status && c.reason == reason && c.message == message && c.observed_generation == generation => {}
        Some(c) => {
            if c.status != status {
                c.last_transition_time = Some(now.clone());
            }
            c.status = status;
            c.reason = reason.into();
            c.message = message.into();
            c.observed_generation = generation;
            c.last_update_time = Some(now.clone());
        }
        None => conditions.push(Condition {
            type_: type_.into(),
            status,
            observed_generation: generation,
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Some(now.clone()),
            last_update_time: Some(now.clone()),
        }),
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_longer_than_the_bound_is_cut_and_a_repeat_changes_nothing() {
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let mut conditions = Vec::new();
        let long = "cluster eu-1: dex v2.22.0 → v2.24.0; ".repeat(1000);
        set_condition(&mut conditions, "Planned", ConditionStatus::True, "Planned", &long, Some(1), &now);
        let kept = conditions[0].message.clone();
        assert!(kept.len() <= MESSAGE_MAX && kept.len() > MESSAGE_MAX - 64, "{}", kept.len());
        assert!(kept.ends_with('…') && long.starts_with(kept.trim_end_matches('…')));
        // The same long message again is no update.
        let later = Time(k8s_openapi::jiff::Timestamp::from_second(60).unwrap());
        set_condition(&mut conditions, "Planned", ConditionStatus::True, "Planned", &long, Some(1), &later);
        assert_eq!(conditions[0].last_update_time, Some(now));
    }
}
