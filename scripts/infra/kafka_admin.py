#!/usr/bin/env python3
"""Administers the three-node SASL_SSL test cluster of scripts/infra/cluster.sh as `admin`.

Run it with .venv/bin/python (it needs confluent_kafka). Connection settings come from the
cluster's env file (.cache/run/cluster/env, or --env FILE); --bootstrap, --ca and
--password-file override them.

  kafka_admin.py users NAME...                  SCRAM-SHA-512 and -256 users, random passwords
                                                in <users dir>/NAME.password (mode 600)
  kafka_admin.py acls apply FILE [--component NAME [--only INDEX]]
  kafka_admin.py acls remove FILE [--component NAME [--only INDEX]]
                                                FILE: `kubefacts acls --format json` ('-': stdin)
  kafka_admin.py acls list                      every binding, one per line
  kafka_admin.py topic create NAME [--partitions P] [--replication-factor R] [--config K=V]...
  kafka_admin.py topic describe NAME            leader, replicas, ISR; min.insync.replicas
  kafka_admin.py check [--brokers N]            admin can connect and sees N brokers

Every change is waited for (describe shows it) before the command returns, so the caller can
act on it at once. Exit status: 0 done, 1 the cluster said no or did not answer, 2 bad input.
Errors are one line on stderr; passwords are never printed.
"""

import argparse
import json
import logging
import os
import re
import secrets
import shlex
import sys
import time
from pathlib import Path

try:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ConfigResource,
        NewTopic,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    from confluent_kafka import TopicCollection
except ImportError as e:  # run with the system python instead of .venv/bin/python
    sys.exit(f"kafka_admin: cannot import confluent_kafka ({e}); run it with .venv/bin/python (scripts/infra/up.sh makes .venv)")

PROG = "kafka_admin"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_ENV = REPO_ROOT / ".cache" / "run" / "cluster" / "env"
ADMIN_USER = "admin"
SCRAM_ITERATIONS = 8192
SCRAM_MECHANISMS = (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256)

# The JSON's spellings -> the admin API's. "cluster" is Kafka's CLUSTER resource, which
# librdkafka calls BROKER; its only name is kafka-cluster.
RESOURCE_TYPES = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "transactional_id": ResourceType.TRANSACTIONAL_ID,
    "cluster": ResourceType.BROKER,
}
RESOURCE_TYPE_NAMES = {v: k for k, v in RESOURCE_TYPES.items()}
PATTERNS = {"literal": ResourcePatternType.LITERAL, "prefixed": ResourcePatternType.PREFIXED}
OPERATIONS = {
    op.name.lower(): op for op in AclOperation if op not in (AclOperation.ANY, AclOperation.UNKNOWN)
}
CLUSTER_RESOURCE_NAME = "kafka-cluster"
USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class Failure(Exception):
    """An expected failure: one line on stderr, exit status `code`."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


def bad_input(message):
    return Failure(message, 2)


def kafka_error_text(exc):
    """KafkaException -> "NAME: description", without the KafkaError{...} wrapping."""
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if err is None:
        return str(exc)
    text = err.str()
    return f"{err.name()}: {text}" if text and text != err.name() else err.name()


# --------------------------------------------------------------------------------------------
# Connection
# --------------------------------------------------------------------------------------------


def read_env_file(path):
    """The `export K=V` lines of cluster.sh's env file (values quoted by printf %q)."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        words = shlex.split(line)
        if words and words[0] == "export":
            words = words[1:]
        for word in words:
            key, sep, value = word.partition("=")
            if sep:
                values[key] = value
    return values


class Cluster:
    def __init__(self, args):
        env = {}
        env_path = Path(args.env) if args.env else DEFAULT_ENV
        if env_path.is_file():
            env = read_env_file(env_path)
        elif args.env:
            raise Failure(f"env file {env_path} does not exist (is the cluster up? scripts/infra/cluster.sh up)")
        self.bootstrap = args.bootstrap or env.get("KUBEFACTS_CLUSTER_BOOTSTRAP")
        self.ca = args.ca or env.get("KUBEFACTS_CLUSTER_CA")
        password_file = args.password_file or env.get("KUBEFACTS_CLUSTER_ADMIN_PASSWORD_FILE")
        missing = [
            flag
            for flag, value in (("--bootstrap", self.bootstrap), ("--ca", self.ca), ("--password-file", password_file))
            if not value
        ]
        if missing:
            raise Failure(
                f"no {', '.join(missing)} given and no cluster env file at {env_path} (run scripts/infra/cluster.sh up)"
            )
        try:
            self.password = Path(password_file).read_text().rstrip("\n")
        except OSError as e:
            raise Failure(f"cannot read the admin password file {password_file}: {e.strerror}")
        if not Path(self.ca).is_file():
            raise Failure(f"CA certificate {self.ca} does not exist")
        cluster_dir = env.get("KUBEFACTS_CLUSTER_DIR") or str(DEFAULT_ENV.parent)
        self.users_dir = Path(args.users_dir or env.get("KUBEFACTS_CLUSTER_USERS_DIR") or Path(cluster_dir) / "users")
        self.timeout = args.timeout
        self.last_error = None
        # librdkafka's log lines would go to stderr; errors are kept and named in our message.
        quiet = logging.getLogger("kafka_admin.librdkafka")
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        self.admin = AdminClient(
            {
                "bootstrap.servers": self.bootstrap,
                "security.protocol": "SASL_SSL",
                "sasl.mechanisms": "SCRAM-SHA-512",
                "sasl.username": ADMIN_USER,
                "sasl.password": self.password,
                "ssl.ca.location": self.ca,
                "logger": quiet,
                "error_cb": self._on_error,
            }
        )
        self._connected = False

    def _on_error(self, err):
        self.last_error = err

    def connect(self):
        """First contact: a clear message naming the bootstrap when the cluster is not there."""
        if self._connected:
            return
        try:
            self.describe_cluster()
        except KafkaException as e:
            self.admin.poll(0)  # serves error_cb: the transport/TLS/SASL error, if there was one
            cause = self.last_error.str() if self.last_error is not None else kafka_error_text(e)
            raise Failure(f"cannot use the cluster at {self.bootstrap} as {ADMIN_USER} over SASL_SSL: {cause}")
        self._connected = True

    def describe_cluster(self):
        return self.admin.describe_cluster(request_timeout=self.timeout).result()

    def wait_for(self, what, check, timeout=None):
        """Polls check() (True when done) until the timeout; fails naming `what`."""
        deadline = time.monotonic() + (timeout or self.timeout)
        delay = 0.05
        while True:
            try:
                if check():
                    return
                last = "not yet"
            except KafkaException as e:
                last = kafka_error_text(e)
            if time.monotonic() >= deadline:
                raise Failure(f"timed out after {timeout or self.timeout:g} s waiting for {what} (last: {last})")
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


def result_or_fail(future, what):
    try:
        return future.result()
    except KafkaException as e:
        raise Failure(f"{what}: {kafka_error_text(e)}")


# --------------------------------------------------------------------------------------------
# users
# --------------------------------------------------------------------------------------------


def write_secret(path, value):
    """value + newline into path, mode 600 (also when the file already existed)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (value + "\n").encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def cmd_users(cluster, args):
    names = list(dict.fromkeys(args.names))
    for name in names:
        if not USER_NAME.match(name):
            raise bad_input(f"user name '{name}' is not [A-Za-z0-9][A-Za-z0-9._-]*")
        if name == ADMIN_USER:
            raise bad_input(f"'{ADMIN_USER}' is the cluster's own user (made by cluster.sh); pick another name")
    cluster.connect()
    passwords = {name: secrets.token_urlsafe(24) for name in names}
    # One request per mechanism: the broker answers DUPLICATE_RESOURCE to a request that
    # names a user twice (as librdkafka sends it), even for two mechanisms.
    for mechanism in SCRAM_MECHANISMS:
        alterations = [
            UserScramCredentialUpsertion(name, ScramCredentialInfo(mechanism, SCRAM_ITERATIONS), passwords[name].encode())
            for name in names
        ]
        futures = cluster.admin.alter_user_scram_credentials(alterations, request_timeout=cluster.timeout)
        for name, future in futures.items():
            result_or_fail(future, f"creating {mechanism.name} credentials for {name}")

    def all_visible():
        described = cluster.admin.describe_user_scram_credentials(names, request_timeout=cluster.timeout)
        for future in described.values():
            info = future.result()  # raises RESOURCE_NOT_FOUND while the user is unknown
            if {i.mechanism for i in info.scram_credential_infos} < set(SCRAM_MECHANISMS):
                return False
        return True

    cluster.wait_for(f"the SCRAM credentials of {', '.join(names)}", all_visible)
    cluster.users_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(cluster.users_dir, 0o700)
    for name in names:
        write_secret(cluster.users_dir / f"{name}.password", passwords[name])
        print(name)


# --------------------------------------------------------------------------------------------
# acls
# --------------------------------------------------------------------------------------------


def load_acl_file(source):
    try:
        if source == "-":
            return json.load(sys.stdin)
        with open(source) as f:
            return json.load(f)
    except OSError as e:
        raise bad_input(f"cannot read {source}: {e.strerror}")
    except json.JSONDecodeError as e:
        raise bad_input(f"{'stdin' if source == '-' else source} is not JSON: {e}")


def field(obj, key, where):
    if not isinstance(obj, dict):
        raise bad_input(f"{where} is not an object")
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise bad_input(f"{where} has no string '{key}'")
    return value


def bindings_from(doc, component=None, only=None):
    """The AclBindings the document asks for (all, one component, or one of its acls)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("components"), list):
        raise bad_input("expected an object with a 'components' list")
    components = doc["components"]
    if component is not None:
        components = [c for c in components if isinstance(c, dict) and c.get("component") == component]
        if not components:
            raise bad_input(f"no component '{component}' in the file")
    bindings = []
    for ci, comp in enumerate(components):
        name = comp.get("component") if isinstance(comp, dict) else None
        where = f"component '{name}'" if isinstance(name, str) else f"components[{ci}]"
        principal = field(comp, "principal", where)
        if not principal.startswith("User:") or principal == "User:":
            raise bad_input(f"{where}: principal '{principal}' is not User:NAME")
        acls = comp.get("acls")
        if not isinstance(acls, list):
            raise bad_input(f"{where} has no 'acls' list")
        indexed = list(enumerate(acls))
        if only is not None:
            if not 0 <= only < len(acls):
                raise bad_input(f"--only {only}: {where} has {len(acls)} acls (indexes 0..{len(acls) - 1})")
            indexed = [indexed[only]]
        for ai, acl in indexed:
            at = f"{where} acls[{ai}]"
            rtype = field(acl, "resource_type", at)
            if rtype not in RESOURCE_TYPES:
                raise bad_input(f"{at}: unknown resource_type '{rtype}' (known: {', '.join(RESOURCE_TYPES)})")
            pattern = field(acl, "pattern", at)
            if pattern not in PATTERNS:
                raise bad_input(f"{at}: unknown pattern '{pattern}' (known: {', '.join(PATTERNS)})")
            operation = field(acl, "operation", at)
            if operation not in OPERATIONS:
                raise bad_input(f"{at}: unknown operation '{operation}' (known: {', '.join(OPERATIONS)})")
            rname = field(acl, "name", at)
            if rtype == "cluster" and (rname != CLUSTER_RESOURCE_NAME or pattern != "literal"):
                raise bad_input(f"{at}: the cluster resource is literal '{CLUSTER_RESOURCE_NAME}', not {pattern} '{rname}'")
            bindings.append(
                AclBinding(
                    RESOURCE_TYPES[rtype],
                    rname,
                    PATTERNS[pattern],
                    principal,
                    "*",
                    OPERATIONS[operation],
                    AclPermissionType.ALLOW,
                )
            )
    return list(dict.fromkeys(bindings))


def describe_all(cluster):
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    return set(cluster.admin.describe_acls(everything, request_timeout=cluster.timeout).result())


def show(binding):
    return (
        f"{binding.principal} {binding.permission_type.name.lower()} {binding.operation.name.lower()}"
        f" {RESOURCE_TYPE_NAMES.get(binding.restype, binding.restype.name.lower())}"
        f" {binding.resource_pattern_type.name.lower()} {binding.name} host={binding.host}"
    )


def cmd_acls(cluster, args):
    if args.action == "list":
        cluster.connect()
        try:
            bindings = describe_all(cluster)
        except KafkaException as e:
            raise Failure(f"describing ACLs: {kafka_error_text(e)}")
        for line in sorted(show(b) for b in bindings):
            print(line)
        return
    bindings = bindings_from(args.doc, args.component, args.only)  # read and checked by main()
    if not bindings:
        print("no ACLs in the selection", file=sys.stderr)
        return
    cluster.connect()
    if args.action == "apply":
        futures = cluster.admin.create_acls(bindings, request_timeout=cluster.timeout)
        for binding, future in futures.items():
            result_or_fail(future, f"creating ACL [{show(binding)}]")
        cluster.wait_for(f"{len(bindings)} ACL(s) to show in describe_acls", lambda: set(bindings) <= describe_all(cluster))
        verb = "applied"
    else:
        # Exact filters: every field set, so each one matches its own binding only.
        filters = [
            AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type)
            for b in bindings
        ]
        futures = cluster.admin.delete_acls(filters, request_timeout=cluster.timeout)
        for f, future in futures.items():
            result_or_fail(future, f"deleting ACL [{show(f)}]")
        cluster.wait_for(
            f"{len(bindings)} ACL(s) to be gone from describe_acls", lambda: not (set(bindings) & describe_all(cluster))
        )
        verb = "removed"
    for b in bindings:
        print(f"{verb}: {show(b)}")


# --------------------------------------------------------------------------------------------
# topic, check
# --------------------------------------------------------------------------------------------


def describe_topic(cluster, name):
    futures = cluster.admin.describe_topics(TopicCollection([name]), request_timeout=cluster.timeout)
    return futures[name].result()


def cmd_topic(cluster, args):
    if args.partitions < 1 or args.replication_factor < 1:
        raise bad_input("--partitions and --replication-factor must be >= 1")
    configs = {}
    for kv in args.config:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            raise bad_input(f"--config '{kv}' is not KEY=VALUE")
        configs[key] = value
    cluster.connect()
    if args.action == "create":
        topic = NewTopic(
            args.name, num_partitions=args.partitions, replication_factor=args.replication_factor, config=configs
        )
        futures = cluster.admin.create_topics([topic], request_timeout=cluster.timeout)
        result_or_fail(futures[args.name], f"creating topic {args.name}")

        def led():
            d = describe_topic(cluster, args.name)
            return len(d.partitions) == args.partitions and all(p.leader is not None for p in d.partitions)

        cluster.wait_for(f"every partition of {args.name} to have a leader", led)
        print(args.name)
        return
    try:
        d = describe_topic(cluster, args.name)
    except KafkaException as e:
        raise Failure(f"describing topic {args.name}: {kafka_error_text(e)}")
    resource = ConfigResource(ConfigResource.Type.TOPIC, args.name)
    entries = result_or_fail(
        cluster.admin.describe_configs([resource], request_timeout=cluster.timeout)[resource],
        f"describing the configs of {args.name}",
    )
    rfs = {len(p.replicas) for p in d.partitions}
    min_isr = entries.get("min.insync.replicas")
    print(
        f"topic {d.name} partitions={len(d.partitions)} replication_factor={','.join(map(str, sorted(rfs)))}"
        f" min.insync.replicas={min_isr.value if min_isr else '?'}"
    )
    for p in sorted(d.partitions, key=lambda p: p.id):
        leader = p.leader.id if p.leader is not None else "none"
        print(
            f"  partition {p.id} leader={leader} replicas={','.join(str(r.id) for r in p.replicas)}"
            f" isr={','.join(str(r.id) for r in p.isr)}"
        )


def cmd_check(cluster, args):
    cluster.connect()
    state = {}

    def enough():
        state["c"] = cluster.describe_cluster()
        return len(state["c"].nodes) >= args.brokers

    cluster.wait_for(f"{args.brokers} brokers", enough)
    c = state["c"]
    nodes = ",".join(str(n.id) for n in sorted(c.nodes, key=lambda n: n.id))
    controller = c.controller.id if c.controller is not None else "?"
    print(f"cluster {c.cluster_id}: brokers {nodes} (controller {controller}) at {cluster.bootstrap}, as {ADMIN_USER} over SASL_SSL")


# --------------------------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        print(f"{PROG}: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def parse_args(argv):
    p = Parser(prog="kafka_admin.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", help=f"cluster env file (default: {DEFAULT_ENV})")
    p.add_argument("--bootstrap", help="host:port[,...] of the SASL_SSL listeners")
    p.add_argument("--ca", help="CA certificate (PEM)")
    p.add_argument("--password-file", help="admin's password")
    p.add_argument("--users-dir", help="where `users` writes NAME.password (default: <cluster dir>/users)")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds for each request and each wait (default 15)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    users = sub.add_parser("users", help="create SCRAM users with random passwords")
    users.add_argument("names", nargs="+", metavar="NAME")

    acls = sub.add_parser("acls", help="apply, remove or list ACLs")
    acls.add_argument("action", choices=["apply", "remove", "list"])
    acls.add_argument("file", nargs="?", metavar="FILE", help="the JSON of `kubefacts acls --format json`, '-' for stdin")
    acls.add_argument("--component", help="only this component's ACLs")
    acls.add_argument("--only", type=int, metavar="INDEX", help="only the component's INDEX-th acl (0-based)")

    topic = sub.add_parser("topic", help="create or describe a topic")
    topic.add_argument("action", choices=["create", "describe"])
    topic.add_argument("name", metavar="NAME")
    topic.add_argument("--partitions", type=int, default=1)
    topic.add_argument("--replication-factor", type=int, default=3)
    topic.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")

    check = sub.add_parser("check", help="admin can connect; wait for N brokers")
    check.add_argument("--brokers", type=int, default=1)
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    commands = {"users": cmd_users, "acls": cmd_acls, "topic": cmd_topic, "check": cmd_check}
    try:
        # Input errors of `acls` come before any connection attempt.
        if args.command == "acls" and args.action == "list" and args.file is not None:
            raise bad_input("acls list takes no FILE")
        if args.command == "acls" and args.action != "list":
            if args.file is None:
                raise bad_input(f"acls {args.action} needs a FILE ('-' for stdin)")
            if args.only is not None and args.component is None:
                raise bad_input("--only needs --component")
            args.doc = load_acl_file(args.file)
            bindings_from(args.doc, args.component, args.only)
        commands[args.command](Cluster(args), args)
    except Failure as f:
        print(f"{PROG}: {f}", file=sys.stderr)
        return f.code
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
