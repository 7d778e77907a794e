//! Annotation keys the pipeline reads off Kubernetes objects: part of the input contract,
//! since minimization keeps exactly these (an allowlist) and the processors read them.

/// The annotation a Job declares its dependencies with, by default (`[cleanup]`: the Jobs,
/// same namespace, comma-separated, kept while it has not finished).
pub const DEFAULT_DEPENDENCY_ANNOTATION: &str = "kubefacts.io/depends-on";

/// The annotation that overrides a CronJob's expected interval (a duration such as `2h`,
/// `90m`, `1d`): `[coverage]` then expects progress that long after the last, schedule
/// ignored.
pub const EXPECTED_INTERVAL_ANNOTATION: &str = "kubefacts.io/expected-interval";

/// The annotation kubectl reads to pick a Pod's default container (`[sessions]`: the
/// session Pod's main container).
pub const DEFAULT_CONTAINER_ANNOTATION: &str = "kubectl.kubernetes.io/default-container";
