//! The Kubernetes kinds kubefacts watches, named: comparisons of an object's or an owner
//! reference's `kind` go through [`Kind`], whose [`Kind::as_str`] is the API's spelling.

/// A Kubernetes kind kubefacts watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `v1` `Pod`.
    Pod,
    /// `batch/v1` `Job`.
    Job,
    /// `batch/v1` `CronJob`.
    CronJob,
    /// `coordination.k8s.io/v1` `Lease`.
    Lease,
    /// `v1` `Namespace`.
    Namespace,
}

impl Kind {
    /// The kind as the API server spells it (`kind` of an object or owner reference).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pod => "Pod",
            Self::Job => "Job",
            Self::CronJob => "CronJob",
            Self::Lease => "Lease",
            Self::Namespace => "Namespace",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<Kind> for str {
    fn eq(&self, kind: &Kind) -> bool {
        self == kind.as_str()
    }
}

impl PartialEq<Kind> for &str {
    fn eq(&self, kind: &Kind) -> bool {
        *self == kind.as_str()
    }
}

impl PartialEq<Kind> for String {
    fn eq(&self, kind: &Kind) -> bool {
        self == kind.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_compare_with_their_api_spelling() {
        let all = [Kind::Pod, Kind::Job, Kind::CronJob, Kind::Lease, Kind::Namespace];
        assert_eq!(all.map(Kind::as_str), ["Pod", "Job", "CronJob", "Lease", "Namespace"]);
        let owner_kind = "CronJob".to_owned();
        assert!(owner_kind == Kind::CronJob && "Job" != Kind::CronJob && *"Lease" == Kind::Lease);
    }
}
