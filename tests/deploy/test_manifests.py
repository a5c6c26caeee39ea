#!/usr/bin/python3
"""test_manifests.py -- the files in deploy/ agree with each other and with
the daemon.

    /usr/bin/python3 tests/deploy/test_manifests.py PATH/TO/delay-bridge

Checks, each printed as "ok:" or "FAIL:" with what is wrong and where:

  Kubernetes (deploy/kubernetes/*.yaml)
    - every file starts with a comment and parses; no object names a
      namespace (apply with kubectl -n);
    - the StatefulSet's liveness/startup probes GET /healthz and its
      readiness probe GET /readyz, on a port the container declares, and
      that port is the one http.listen in the ConfigMap's config.json binds
      (with allow_remote when the host is not loopback);
    - beyond loopback the HTTP token is wired: the Secret provides
      DELAY_BRIDGE_HTTP_TOKEN (a placeholder) and the container takes it
      from there; --check-config refuses the ConfigMap's config without it
      (exit 3 naming http.listen) and passes with it;
    - the Service does not invite the token-less annotation scrape job;
      deploy/monitoring/prometheus-scrape.yml scrapes the Service's http
      port with a bearer token;
    - a NetworkPolicy selects the bridge's pods, admits only named sources
      on the HTTP port alone, and lets them reach AMQP and DNS;
    - terminationGracePeriodSeconds * 1000 > shutdown_timeout_ms;
    - the volumeClaimTemplate is mounted at wal.dir; the ConfigMap is
      mounted where --config points;
    - the Secret provides DELAY_BRIDGE_BROKER_URI and the container takes
      it from there;
    - the StatefulSet, Service and PodDisruptionBudget select the pods;
      the Service is headless, governs the StatefulSet, and its Prometheus
      annotations name the HTTP port and /metrics;
    - non-root, read-only root file system, no privilege escalation;
    - requests cover the sizing written in statefulset.yaml.
  Configurations
    - the ConfigMap's config.json, deploy/examples/*.json and
      deploy/config.example.json pass `delay-bridge -c FILE --check-config`;
      the ConfigMap's one also with the Secret's DELAY_BRIDGE_BROKER_URI.
  RabbitMQ (deploy/rabbitmq/definitions.json)
    - parses; the password hashes are rabbit_password_hashing_sha256 of
      the example passwords in deploy/rabbitmq/README.md;
    - per route, in the route's vhost (its "vhost" key, else the URIs'
      vhost): the bridge user's configure/write/read patterns there match
      the names the route uses (ingress exchange and queue, target and
      dead-letter exchanges) and not names the bridge has no business with;
      likewise that vhost's publisher user (PUBLISHERS); target exchanges
      are declared in that vhost;
    - each vhost's permissions name only the bridge and its own publisher;
      every declared exchange has a queue bound; every ingress queue has a
      dead-letter policy in its vhost, whose exchange is declared.
    - no publisher of any vhost can write amq.default, a retry route's
      ingress exchange, the replication stream or its lease queue (the
      defaults, and each one an example configuration or a README's JSON
      example names), or an exchange bound to them (check_publisher_reach);
      a retry route's ingress is written by no publisher, every other
      route's by its vhost's publisher; the bridge writes the ingress
      exchanges (a drain hands messages back there).

Exit 0 pass, 1 fail, 77 skip (python3-yaml missing).
"""
import base64
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse

try:
    import yaml
except ImportError:
    print("SKIP: python3 cannot import yaml (apt-get install python3-yaml)")
    sys.exit(77)

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy")
K8S = os.path.join(DEPLOY, "kubernetes")

# Keys the HTTP-endpoint work adds to src/config/config.c; until it lands,
# --check-config calls them unknown (see the hint printed on failure).
PENDING_KEYS = ("allow_remote", "instance")

# The example passwords documented in deploy/rabbitmq/README.md.
EXAMPLE_PASSWORDS = {
    "delay-bridge": "example-delay-bridge-password",
    "order-service": "example-order-service-password",
    "billing-service": "example-billing-service-password",
}
BRIDGE_USER = "delay-bridge"
# Each vhost's example publisher (write on its ingress exchanges, nothing else).
PUBLISHERS = {"orders": "order-service", "billing": "billing-service"}

# The sizing statefulset.yaml's comment works out (10 M held 256 B messages).
HELD = 10_000_000
RAM_PER_MSG, RAM_BASE = 54, 20_000_000
WAL_RECORD = 450  # bytes on disk per held message, see the comment
SEGMENT = 64 << 20

failures = []


def ok(msg):
    print("ok:   " + msg)


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def check(cond, good, bad):
    (ok if cond else fail)(good if cond else bad)
    return cond


def rel(path):
    return os.path.relpath(path, ROOT)


def quantity(q):
    """A Kubernetes quantity ("640Mi", "1Gi", "250m", "1") as a number."""
    m = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T|m)?", str(q))
    if not m:
        raise ValueError("not a quantity: %r" % (q,))
    mult = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
            "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}[m.group(2)]
    return float(m.group(1)) * mult


# --- Kubernetes manifests ----------------------------------------------------

def load_manifests():
    objs = {}
    files = sorted(glob.glob(os.path.join(K8S, "*.yaml")) + glob.glob(os.path.join(K8S, "*.yml")))
    check(files, "%d manifests in deploy/kubernetes" % len(files), "no manifests in deploy/kubernetes")
    for f in files:
        text = open(f, encoding="utf-8").read()
        check(text.startswith("#"), "%s starts with a comment" % rel(f),
              "%s: start with a comment saying what the file is and how to use it" % rel(f))
        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as e:
            fail("%s: invalid YAML: %s" % (rel(f), e))
            continue
        for d in docs:
            kind, name = d.get("kind"), (d.get("metadata") or {}).get("name")
            if not (d.get("apiVersion") and kind and name):
                fail("%s: an object lacks apiVersion, kind or metadata.name" % rel(f))
                continue
            check("namespace" not in d["metadata"], "%s: %s/%s names no namespace" % (rel(f), kind, name),
                  "%s: %s/%s sets metadata.namespace; the manifests must be namespace-agnostic"
                  % (rel(f), kind, name))
            if kind in objs:
                fail("%s: a second %s (%s); the test expects one of each" % (rel(f), kind, name))
            objs[kind] = d
    for kind in ("ConfigMap", "Secret", "StatefulSet", "Service", "PodDisruptionBudget"):
        if kind not in objs:
            fail("deploy/kubernetes: no %s" % kind)
    return objs


def listen_port(listen):
    m = re.fullmatch(r"(?:(\[[^\]]+\]|[^:]*):)?(\d+)", listen)
    if not m:
        return None, None, None
    return (m.group(1) or "").strip("[]") or "127.0.0.1", int(m.group(2))


def check_kubernetes(objs, tmp):
    """Returns (the ConfigMap's config, its path in tmp, the Secret's URI); None where missing."""
    cm, sec, sts = objs.get("ConfigMap"), objs.get("Secret"), objs.get("StatefulSet")
    svc, pdb = objs.get("Service"), objs.get("PodDisruptionBudget")
    if not (cm and sts):
        return None, None, None

    # the config
    raw = (cm.get("data") or {}).get("config.json")
    if not check(raw is not None, "ConfigMap %s has key config.json" % cm["metadata"]["name"],
                 "ConfigMap %s has no key config.json" % cm["metadata"]["name"]):
        return None, None, None
    try:
        cfg = json.loads(raw)
    except ValueError as e:
        fail("ConfigMap config.json: invalid JSON: %s" % e)
        return None, None, None
    cfg_path = os.path.join(tmp, "configmap.yaml:config.json")
    with open(cfg_path, "w") as f:
        f.write(raw)

    listen = (cfg.get("http") or {}).get("listen", "")
    host, port = listen_port(listen)
    if not check(port, "config http.listen %r" % listen,
                 "config http.listen %r: expected host:port; the probes need the endpoint" % listen):
        return cfg, cfg_path, None
    remote = host not in ("127.0.0.1", "::1", "localhost")
    if remote:
        check(cfg["http"].get("allow_remote") is True,
              "http.listen binds %s with allow_remote: true" % host,
              "http.listen binds %s (not loopback): the endpoint needs \"allow_remote\": true" % host)
    else:
        fail("http.listen binds loopback %s: the kubelet probes and Prometheus come over the pod IP" % host)

    spec = sts["spec"]
    tpl = spec["template"]
    pod = tpl["spec"]
    pod_labels = tpl["metadata"].get("labels") or {}
    containers = pod.get("containers") or []
    c = next((x for x in containers if x.get("name") == "delay-bridge"), containers[0] if containers else None)
    if not check(c, "StatefulSet has the delay-bridge container", "StatefulSet has no containers"):
        return cfg, cfg_path, None
    check(c.get("image") == "delay-bridge:latest", "image delay-bridge:latest",
          "container image is %r, expected delay-bridge:latest" % c.get("image"))

    # probes on the endpoint's port
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
    check(ports.get("http") == port, "container port http = %d = http.listen's port" % port,
          "container ports %r: expected one named http with containerPort %d (http.listen %r)"
          % (ports, port, listen))

    def probe(name, path, required=True):
        p = c.get(name)
        if p is None:
            if required:
                fail("container has no %s" % name)
            return
        g = p.get("httpGet") or {}
        pport = g.get("port")
        num = ports.get(pport) if isinstance(pport, str) else pport
        if isinstance(pport, str) and pport not in ports:
            fail("%s: port %r is not a port the container declares (%r)" % (name, pport, sorted(ports)))
            return
        check(g.get("path") == path and num == port,
              "%s: GET %s on port %s (%d)" % (name, path, pport, port),
              "%s: GET %s on port %r (= %r); expected %s on the http.listen port %d"
              % (name, g.get("path"), pport, num, path, port))

    probe("livenessProbe", "/healthz")
    probe("readinessProbe", "/readyz")
    probe("startupProbe", "/healthz", required=False)

    # shutdown: the preStop drain, then SIGTERM
    grace = pod.get("terminationGracePeriodSeconds", 30)
    sd = cfg.get("shutdown_timeout_ms", 10000)
    pre = (((c.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command") or []
    drain_s = 0
    if check(pre[:2] == ["delay-bridge", "drain"], "preStop runs delay-bridge drain (%s)" % " ".join(pre),
             "preStop is %r; expected delay-bridge drain, so that scaling down hands the held "
             "messages to the other replicas" % pre):
        cfgflag = [pre[i + 1] for i in range(len(pre) - 1) if pre[i] in ("-c", "--config")]
        tflag = [pre[i + 1] for i in range(len(pre) - 1) if pre[i] in ("-t", "--timeout")]
        args = (c.get("command") or []) + (c.get("args") or [])
        config_path = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--config", "-c")),
                           None)
        check(cfgflag and cfgflag[0] == config_path, "drain reads the daemon's config %s" % config_path,
              "drain --config %r is not the config the container runs with (%s)" % (cfgflag, config_path))
        check(tflag and tflag[0].isdigit(), "drain has a --timeout (%s s)" % (tflag[0] if tflag else None),
              "drain needs --timeout: without it the hook could outlast the grace period")
        drain_s = int(tflag[0]) if tflag and tflag[0].isdigit() else 300
    check(grace * 1000 > sd + drain_s * 1000,
          "terminationGracePeriodSeconds %d s > drain %d s + shutdown_timeout_ms %d ms" % (grace, drain_s, sd),
          "terminationGracePeriodSeconds %d s is not above the drain's %d s plus shutdown_timeout_ms "
          "%d ms: the kubelet would SIGKILL the bridge while it drains or waits for confirms"
          % (grace, drain_s, sd))

    # volumes
    mounts = {m["name"]: m for m in c.get("volumeMounts") or []}
    vcts = spec.get("volumeClaimTemplates") or []
    wal_dir = (cfg.get("wal") or {}).get("dir")
    if check(len(vcts) == 1, "one volumeClaimTemplate (%s)" % (vcts[0]["metadata"]["name"] if vcts else ""),
             "expected one volumeClaimTemplate for the WAL, found %d" % len(vcts)):
        vname = vcts[0]["metadata"]["name"]
        m = mounts.get(vname)
        check(m and m.get("mountPath") == wal_dir,
              "PVC %s mounted at wal.dir %s" % (vname, wal_dir),
              "PVC %s is mounted at %r, but the config's wal.dir is %r"
              % (vname, m and m.get("mountPath"), wal_dir))
        check(not (m or {}).get("readOnly"), "WAL mount is writable", "WAL mount is readOnly")
        check("ReadWriteOnce" in (vcts[0]["spec"].get("accessModes") or []), "WAL claim is ReadWriteOnce",
              "WAL claim should be ReadWriteOnce: one pod, one WAL")
        storage = quantity(vcts[0]["spec"]["resources"]["requests"]["storage"])
        need = 2 * HELD * WAL_RECORD + SEGMENT
        check(storage >= need, "WAL claim %.1f GiB >= 2 x live + 64 MiB = %.1f GiB"
              % (storage / 2**30, need / 2**30),
              "WAL claim %.1f GiB is below the sizing in the comment (%.1f GiB)" % (storage / 2**30, need / 2**30))
    args = (c.get("command") or []) + (c.get("args") or [])
    conf_arg = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--config", "-c")), None)
    cm_vol = next((v for v in pod.get("volumes") or []
                   if (v.get("configMap") or {}).get("name") == cm["metadata"]["name"]), None)
    if check(cm_vol, "ConfigMap %s is a pod volume" % cm["metadata"]["name"],
             "no pod volume uses ConfigMap %s" % cm["metadata"]["name"]):
        m = mounts.get(cm_vol["name"])
        # a whole-volume mount shows the key as a file; a subPath mount is the file
        where = m and (m["mountPath"] if m.get("subPath") else m["mountPath"].rstrip("/") + "/config.json")
        check(where and where == conf_arg, "--config %s is the mounted ConfigMap" % conf_arg,
              "--config is %r but the ConfigMap's config.json is mounted at %r" % (conf_arg, where))

    # secret -> env
    env = {e["name"]: e for e in c.get("env") or []}
    e = env.get("DELAY_BRIDGE_BROKER_URI")
    ref = ((e or {}).get("valueFrom") or {}).get("secretKeyRef") or {}
    from_envfrom = any((x.get("secretRef") or {}).get("name") == (sec or {}).get("metadata", {}).get("name")
                       for x in c.get("envFrom") or [])
    secret_uri = None
    if sec:
        sdata = dict(sec.get("stringData") or {})
        for k, v in (sec.get("data") or {}).items():
            sdata[k] = base64.b64decode(v).decode()
        sname = sec["metadata"]["name"]
        check("DELAY_BRIDGE_BROKER_URI" in sdata, "Secret %s provides DELAY_BRIDGE_BROKER_URI" % sname,
              "Secret %s has no key DELAY_BRIDGE_BROKER_URI" % sname)
        secret_uri = sdata.get("DELAY_BRIDGE_BROKER_URI")
        check((ref.get("name") == sname and ref.get("key") in sdata) or from_envfrom,
              "container env DELAY_BRIDGE_BROKER_URI comes from Secret %s" % sname,
              "container env DELAY_BRIDGE_BROKER_URI does not come from Secret %s (env: %r)" % (sname, e))
        check("CHANGE-ME" in (secret_uri or ""), "the Secret's password is an obvious placeholder",
              "the Secret's URI should carry a placeholder password (CHANGE-ME), not a real one")
        if remote:
            check_http_token(sec, sdata, c, from_envfrom, host)
    elif remote:
        fail("http.listen binds %s (not loopback) and there is no Secret to take "
             "DELAY_BRIDGE_HTTP_TOKEN from" % host)

    # labels and selectors
    def selects(sel, what):
        check(sel and all(pod_labels.get(k) == v for k, v in sel.items()),
              "%s selects the pods (%s)" % (what, sel),
              "%s selector %r does not match the pod labels %r" % (what, sel, pod_labels))

    selects(spec["selector"].get("matchLabels"), "StatefulSet")
    if pdb:
        selects(pdb["spec"].get("selector", {}).get("matchLabels"), "PodDisruptionBudget")
        check("maxUnavailable" in pdb["spec"] or "minAvailable" in pdb["spec"],
              "PodDisruptionBudget sets a budget", "PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
    if svc:
        selects(svc["spec"].get("selector"), "Service")
        check(svc["spec"].get("clusterIP") == "None", "Service %s is headless" % svc["metadata"]["name"],
              "Service %s: clusterIP should be None (headless, governs the StatefulSet)" % svc["metadata"]["name"])
        check(spec.get("serviceName") == svc["metadata"]["name"],
              "StatefulSet serviceName is the Service", "StatefulSet serviceName %r != Service %r"
              % (spec.get("serviceName"), svc["metadata"]["name"]))
        check_prometheus_scrape(svc, port)
        sports = svc["spec"].get("ports") or []
        check(any(p.get("targetPort") in ("http", port) and p.get("port") == port for p in sports),
              "Service port %d -> container port http" % port,
              "Service ports %r: expected port %d targeting the container's http port" % (sports, port))

    check_networkpolicy(objs.get("NetworkPolicy"), pod_labels, ports, port)

    # hardening
    psc, csc = pod.get("securityContext") or {}, c.get("securityContext") or {}
    check(csc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True and
          csc.get("runAsUser", psc.get("runAsUser", 1)) != 0,
          "runs as non-root", "set securityContext.runAsNonRoot: true (and a non-zero runAsUser)")
    check(csc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem",
          "container securityContext.readOnlyRootFilesystem should be true")
    check(csc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation: false",
          "container securityContext.allowPrivilegeEscalation should be false")
    check("ALL" in ((csc.get("capabilities") or {}).get("drop") or []), "capabilities drop ALL",
          "container securityContext.capabilities.drop should be [ALL]")
    check(psc.get("fsGroup") is not None, "fsGroup set (the WAL volume is writable for the user)",
          "pod securityContext.fsGroup missing: a non-root user may not be able to write the PVC")

    # resources
    res = c.get("resources") or {}
    try:
        req_mem = quantity(res["requests"]["memory"])
        lim_mem = quantity(res["limits"]["memory"])
        need = HELD * RAM_PER_MSG + RAM_BASE
        check(req_mem >= need and lim_mem >= req_mem,
              "memory request %d MiB >= %d MiB (10 M x 54 B + 20 MB), limit %d MiB"
              % (req_mem / 2**20, need / 2**20, lim_mem / 2**20),
              "memory request %d MiB / limit %d MiB below the sizing %d MiB"
              % (req_mem / 2**20, lim_mem / 2**20, need / 2**20))
        quantity(res["requests"]["cpu"])
    except (KeyError, TypeError, ValueError) as ex:
        fail("container resources: requests/limits incomplete or malformed: %s" % ex)

    return cfg, cfg_path, secret_uri


# --- the HTTP endpoint beyond loopback: token, scraping, NetworkPolicy -------

# The Secret's HTTP token, for --check-config of the ConfigMap's config (main).
K8S_SECRET = {}
TOKEN_ENV = "DELAY_BRIDGE_HTTP_TOKEN"
SCRAPE = os.path.join(DEPLOY, "monitoring", "prometheus-scrape.yml")


def check_http_token(sec, sdata, c, from_envfrom, host):
    """Beyond loopback the bridge needs DELAY_BRIDGE_HTTP_TOKEN: from the Secret."""
    sname = sec["metadata"]["name"]
    token = sdata.get(TOKEN_ENV)
    if check(token, "Secret %s provides %s" % (sname, TOKEN_ENV),
             "http.listen binds %s (not loopback) but Secret %s has no key %s: the bridge "
             "refuses to start without it" % (host, sname, TOKEN_ENV)):
        K8S_SECRET[TOKEN_ENV] = token
        check("CHANGE-ME" in token, "the Secret's HTTP token is an obvious placeholder",
              "the Secret's %s should be a placeholder (CHANGE-ME...), not a real token" % TOKEN_ENV)
    e = {x["name"]: x for x in c.get("env") or []}.get(TOKEN_ENV)
    ref = ((e or {}).get("valueFrom") or {}).get("secretKeyRef") or {}
    check((ref.get("name") == sname and ref.get("key") == TOKEN_ENV and token) or
          (e is None and from_envfrom),
          "container env %s comes from Secret %s" % (TOKEN_ENV, sname),
          "container env %s does not come from Secret %s (env: %r): a listener on %s "
          "without the token" % (TOKEN_ENV, sname, e, host))
    check(not (e or {}).get("value"), "the HTTP token is not written into the StatefulSet",
          "container env %s has a literal value: take it from the Secret" % TOKEN_ENV)


def check_prometheus_scrape(svc, port):
    """/metrics needs the token: a job of its own that sends it, not the annotation job."""
    ann = svc["metadata"].get("annotations") or {}
    check(ann.get("prometheus.io/scrape") != "true",
          "Service does not invite the token-less annotation scrape job",
          "Service has prometheus.io/scrape \"true\": the generic job sends no token (401), "
          "and giving it the token would send it to every annotated service")
    check(ann.get("prometheus.io/port", str(port)) == str(port) and
          ann.get("prometheus.io/path", "/metrics") == "/metrics",
          "Service annotations name port %d, path /metrics" % port,
          "Service prometheus.io annotations %r: expected port \"%d\", path /metrics" % (ann, port))
    try:
        doc = yaml.safe_load(open(SCRAPE, encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        fail("%s: %s" % (rel(SCRAPE), e))
        return
    jobs = [j for j in (doc or {}).get("scrape_configs") or [] if isinstance(j, dict)]
    job = next((j for j in jobs if j.get("job_name") == "delay-bridge"), None)
    if not check(job, "%s has job delay-bridge" % rel(SCRAPE), "%s: no job_name delay-bridge" % rel(SCRAPE)):
        return
    auth = job.get("authorization") or {}
    check(auth.get("type", "Bearer") == "Bearer" and (auth.get("credentials_file") or auth.get("credentials"))
          or job.get("bearer_token_file"),
          "the scrape job sends a bearer token", "%s: the delay-bridge job sends no bearer token "
          "(authorization.credentials_file): /metrics answers 401 without it" % rel(SCRAPE))
    check(job.get("metrics_path", "/metrics") == "/metrics", "the scrape job reads /metrics",
          "%s: metrics_path %r" % (rel(SCRAPE), job.get("metrics_path")))
    keep = [r for r in job.get("relabel_configs") or [] if r.get("action") == "keep"]
    sname, pname = svc["metadata"]["name"], next((p.get("name") for p in svc["spec"].get("ports") or []
                                                    if p.get("port") == port), None)
    check(any(re.fullmatch(r.get("regex", ""), "%s;%s" % (sname, pname)) for r in keep),
          "the scrape job keeps Service %s port %s" % (sname, pname),
          "%s: no keep rule matching Service %s, port %s" % (rel(SCRAPE), sname, pname))


def check_networkpolicy(np, pod_labels, ports, port):
    """A NetworkPolicy selects the bridge's pods: only named sources, on the HTTP port alone."""
    if not check(np, "a NetworkPolicy (deploy/kubernetes/networkpolicy.yaml)",
                 "deploy/kubernetes: no NetworkPolicy: any pod in the cluster reaches port %d" % port):
        return
    spec = np.get("spec") or {}
    sel = (spec.get("podSelector") or {}).get("matchLabels") or {}
    check(sel and all(pod_labels.get(k) == v for k, v in sel.items()),
          "NetworkPolicy selects the pods (%s)" % sel,
          "NetworkPolicy podSelector %r does not select the bridge's pods %r" % (sel, pod_labels))
    types = spec.get("policyTypes") or []
    check("Ingress" in types and "Egress" in types, "NetworkPolicy restricts ingress and egress",
          "NetworkPolicy policyTypes %r: expected Ingress and Egress" % types)
    ingress = spec.get("ingress") or []
    check(ingress, "NetworkPolicy admits someone (Prometheus)", "NetworkPolicy admits nobody: "
          "Prometheus cannot scrape")
    for i, rule in enumerate(ingress):
        srcs = rule.get("from") or []
        check(srcs and all(s.get("podSelector") or s.get("namespaceSelector") for s in srcs),
              "ingress rule %d admits named sources only" % i,
              "ingress rule %d has no \"from\" (or an empty selector): it admits every pod" % i)
        rports = [ports.get(p.get("port"), p.get("port")) for p in rule.get("ports") or []]
        check(rports and all(p == port for p in rports), "ingress rule %d: port %d only" % (i, port),
              "ingress rule %d ports %r: expected the HTTP port %d alone" % (i, rule.get("ports"), port))
    eports = {p.get("port") for r in spec.get("egress") or [] for p in r.get("ports") or []}
    check(5672 in eports or 5671 in eports, "egress to AMQP (5672/5671)",
          "NetworkPolicy egress %r: the bridge cannot reach RabbitMQ" % sorted(eports, key=str))
    check(53 in eports, "egress to DNS (53)", "NetworkPolicy egress has no port 53: the broker's "
          "name does not resolve")


def check_configmap_token(binary, cm_path, secret_uri):
    """The ConfigMap's config without the token: refused at start (exit 3, http.listen)."""
    env = dict(os.environ)
    env.pop("DELAY_BRIDGE_BROKER_URI", None)
    env.pop(TOKEN_ENV, None)
    if secret_uri:
        env["DELAY_BRIDGE_BROKER_URI"] = secret_uri
    p = subprocess.run([binary, "-c", cm_path, "--check-config"], env=env, capture_output=True,
                       text=True, timeout=30)
    msg = (p.stderr or p.stdout).strip()
    check(p.returncode == 3 and "http.listen" in msg and TOKEN_ENV in msg,
          "ConfigMap config.json without %s: --check-config exits 3 naming http.listen" % TOKEN_ENV,
          "ConfigMap config.json without %s: --check-config exited %d (%s); expected 3 naming "
          "http.listen: a listener beyond loopback must not start without the token"
          % (TOKEN_ENV, p.returncode, msg[:200]))


# --- configurations ----------------------------------------------------------

def check_config(binary, path, label, env_uri=None, env_extra=None):
    env = dict(os.environ)
    env.pop("DELAY_BRIDGE_BROKER_URI", None)
    env.pop(TOKEN_ENV, None)
    env.update(env_extra or {})
    if env_uri is not None:
        env["DELAY_BRIDGE_BROKER_URI"] = env_uri
    try:
        p = subprocess.run([binary, "-c", path, "--check-config"], env=env, capture_output=True,
                           text=True, timeout=30)
    except OSError as e:
        fail("%s: cannot run %s: %s" % (label, binary, e))
        return
    if p.returncode == 0:
        ok("%s passes --check-config" % label)
        return
    msg = (p.stderr or p.stdout).strip()
    hint = ""
    m = re.search(r'unknown key "?([A-Za-z_]+)"?', msg)
    if m and m.group(1) in PENDING_KEYS:
        hint = ("\n      (\"%s\" belongs to the HTTP endpoint / instance work that has not landed in "
                "src/config/config.c yet; this passes once it does)" % m.group(1))
    fail("%s: delay-bridge --check-config exited %d: %s%s" % (label, p.returncode, msg, hint))


# --- RabbitMQ definitions ----------------------------------------------------

def uri_vhost(uri):
    return urllib.parse.unquote(urllib.parse.urlsplit(uri).path[1:]) or "/"


def route_vhost(r, uri_vh):
    """A route's vhost: its "vhost" key, or the URIs' (config_route_vhost)."""
    return r.get("vhost") or uri_vh


def check_definitions(configs):
    path = os.path.join(DEPLOY, "rabbitmq", "definitions.json")
    try:
        d = json.load(open(path))
    except (OSError, ValueError) as e:
        fail("%s: %s" % (rel(path), e))
        return
    ok("%s parses" % rel(path))
    readme = open(os.path.join(DEPLOY, "rabbitmq", "README.md")).read()

    users = {u["name"]: u for u in d.get("users", [])}
    for name, pw in EXAMPLE_PASSWORDS.items():
        u = users.get(name)
        if not u:
            fail("definitions.json: no user %s" % name)
            continue
        raw = base64.b64decode(u["password_hash"])
        good = (u.get("hashing_algorithm") == "rabbit_password_hashing_sha256" and len(raw) == 36
                and hashlib.sha256(raw[:4] + pw.encode()).digest() == raw[4:])
        check(good, "user %s: sha256 hash of the documented example password" % name,
              "user %s: password_hash is not rabbit_password_hashing_sha256 of %r" % (name, pw))
        check(pw in readme, "deploy/rabbitmq/README.md documents %s's example password" % name,
              "deploy/rabbitmq/README.md does not mention %s's example password %r" % (name, pw))
        check(not u.get("tags"), "user %s has no tags (no management access)" % name,
              "user %s has tags %r; the example users need none" % (name, u.get("tags")))
    for name in sorted(set(users) - set(EXAMPLE_PASSWORDS)):
        fail("definitions.json: user %s has no example password in EXAMPLE_PASSWORDS / README.md" % name)

    vhosts = {v["name"] for v in d.get("vhosts", [])}
    perms = {(p["user"], p["vhost"]): p for p in d.get("permissions", [])}
    exchanges = {(x["vhost"], x["name"]): x for x in d.get("exchanges", [])}
    queues = {(q["vhost"], q["name"]) for q in d.get("queues", [])}
    bindings = {(b["vhost"], b["source"], b["destination"], b["routing_key"]) for b in d.get("bindings", [])}

    # each vhost: the bridge and that vhost's own publisher, nobody else
    for (user, vhost) in sorted(perms):
        check(user in (BRIDGE_USER, PUBLISHERS.get(vhost)),
              "permissions: %s on vhost %s" % (user, vhost),
              "definitions.json: %s has permissions on vhost %s; only %s and %s belong there"
              % (user, vhost, BRIDGE_USER, PUBLISHERS.get(vhost)))
    for vhost in sorted(vhosts):
        check(vhost in PUBLISHERS, "vhost %s: publisher %s" % (vhost, PUBLISHERS.get(vhost)),
              "definitions.json: vhost %s has no publisher user in PUBLISHERS" % vhost)

    reported = set()

    def perm_fail(key, msg):
        # the same pattern/name problem shows up in every config: report it once
        if key not in reported:
            reported.add(key)
            fail(msg)

    def matches(pattern, name):
        # RabbitMQ: an Erlang re search, unanchored; "" matches nothing.
        return pattern != "" and re.search(pattern, name) is not None

    used = set()     # (vhost, name) of every name a route uses
    ingress = set()  # (vhost, ingress queue)
    # a vhost with a retry route lets the bridge write amq.default (the send back)
    retry_vhosts = set()
    for label, cfg, uris in configs:
        uvh = {uri_vhost(u) for u in uris}
        if len(uvh) == 1:
            uvh = uvh.pop()
            retry_vhosts |= {route_vhost(r, uvh) for r in cfg["routes"] if r.get("retry")}
    for label, cfg, uris in configs:
        vh = {uri_vhost(u) for u in uris}
        if not check(len(vh) == 1, "%s: its URIs name one vhost %s" % (label, sorted(vh)),
                     "%s: URIs name vhosts %s; expected one (the routes' default)" % (label, sorted(vh))):
            continue
        uri_vh = vh.pop()
        route_vhosts = sorted({route_vhost(r, uri_vh) for r in cfg["routes"]})
        missing = [v for v in route_vhosts if v not in vhosts]
        if not check(not missing, "%s: vhost(s) %s are in definitions.json" % (label, route_vhosts),
                     "%s: vhost(s) %s are not in definitions.json (%s)" % (label, missing, sorted(vhosts))):
            continue
        publishers = []
        for r in cfg["routes"]:
            vhost = route_vhost(r, uri_vh)
            pub = PUBLISHERS.get(vhost)
            bp, pp = perms.get((BRIDGE_USER, vhost)), perms.get((pub, vhost))
            if not (bp and pp):
                perm_fail(("noperm", vhost), "definitions.json: no permissions for %s and %s on vhost %s"
                          % (BRIDGE_USER, pub, vhost))
                continue
            if pub not in publishers:
                publishers.append(pub)
            where = "%s route %s (vhost %s)" % (label, r["name"], vhost)
            rt = r.get("retry")
            if rt:  # a retry route: no target; back through amq.default, parks in parking_exchange
                r = dict(r, target_exchange="", invalid_delay="dead-letter",
                         dead_letter_exchange=rt["parking_exchange"])
            ingress.add((vhost, r["ingress_queue"]))
            need = {"configure": [r["ingress_exchange"], r["ingress_queue"]],
                    # the ingress exchange: a drain hands held messages back to it
                    "write": [r["ingress_queue"], r["ingress_exchange"], r["target_exchange"] or "amq.default"],
                    "read": [r["ingress_exchange"], r["ingress_queue"]]}
            if rt and rt.get("parking_queue"):
                need["configure"] += [rt["parking_exchange"], rt["parking_queue"]]
                need["write"].append(rt["parking_queue"])
                need["read"].append(rt["parking_exchange"])
            if r.get("invalid_delay") == "dead-letter":
                need["write"].append(r["dead_letter_exchange"])
            if r.get("declare_target"):
                need["configure"].append(r["target_exchange"])
            for op, names in need.items():
                for n in names:
                    used.add((vhost, n))
                    if not matches(bp[op], n):
                        perm_fail((BRIDGE_USER, vhost, op, n), "%s: %s's %s pattern %r on vhost %s does not "
                                  "match %r, which the bridge needs"
                                  % (where, BRIDGE_USER, op, bp[op], vhost, n))
            if not rt and not matches(pp["write"], r["ingress_exchange"]):
                perm_fail((pub, vhost, "write", r["ingress_exchange"]), "%s: %s cannot publish to the "
                          "ingress exchange %r (write %r)" % (where, pub, r["ingress_exchange"], pp["write"]))
            for ex in filter(None, [r["target_exchange"],
                                    r.get("dead_letter_exchange") if r.get("invalid_delay") == "dead-letter" else ""]):
                if rt and rt.get("parking_queue") and ex == rt["parking_exchange"]:
                    continue  # the bridge declares it
                if not r.get("declare_target") and (vhost, ex) not in exchanges:
                    fail("%s: exchange %r is not declared in vhost %s of definitions.json, nor by the "
                         "bridge (declare_target false): publishes would fail" % (where, ex, vhost))
            # names the bridge has no business with
            deny = {
                "configure": [r["target_exchange"], r.get("dead_letter_exchange") or "",
                              r["ingress_queue"] + ".x", "x" + r["ingress_exchange"], "amq.gen-abc",
                              "amq.default", "orders.close"] if not r.get("declare_target") else [],
                "write": ["x" + r["ingress_exchange"],
                          "amq.default" if r["target_exchange"] and vhost not in retry_vhosts else "",
                          r["target_exchange"] + ".x" if r["target_exchange"] else "", "payments", "orders.secret",
                          vhost + ".secret"],
                "read": [r["target_exchange"], r.get("dead_letter_exchange") or "", "orders.close",
                         "orders.delay-errors", r["ingress_queue"] + ".x", "amq.gen-abc"],
            }
            for op, names in deny.items():
                for n in filter(None, names):
                    if n in need[op]:
                        continue
                    if matches(bp[op], n):
                        perm_fail((BRIDGE_USER, vhost, "not", op, n), "%s: %s's %s pattern %r on vhost %s "
                                  "also matches %r; the bridge needs no %s access there"
                                  % (where, BRIDGE_USER, op, bp[op], vhost, n, op))
            for n in [r["ingress_queue"], r["target_exchange"], r.get("dead_letter_exchange") or ""]:
                if n and matches(pp["write"], n):
                    perm_fail((pub, vhost, "not", "write", n), "%s: %s's write pattern %r matches %r: the "
                              "publisher could bypass the delay" % (where, pub, pp["write"], n))
            for op in ("configure", "read"):
                for n in [r["ingress_exchange"], r["ingress_queue"], r["target_exchange"]]:
                    if n and matches(pp[op], n):
                        perm_fail((pub, vhost, "not", op, n), "%s: %s's %s pattern %r matches %r; the "
                                  "publisher needs none" % (where, pub, op, pp[op], n))
        ok("%s: permissions of %s fit its %d route(s) in vhost(s) %s"
           % (label, ", ".join([BRIDGE_USER] + publishers), len(cfg["routes"]), ", ".join(route_vhosts)))

    # the order-closing example's target
    x = exchanges.get(("orders", "orders.close"))
    check(x and x["type"] == "direct" and x["durable"], "exchange orders.close (direct, durable)",
          "definitions.json: exchange orders.close should be a durable direct exchange")
    check(("orders", "orders.close") in queues and ("orders", "orders.close", "orders.close", "close") in bindings,
          "queue orders.close bound to orders.close with key close",
          "definitions.json: queue orders.close bound to exchange orders.close with key \"close\" missing")
    # every declared exchange has a queue bound, so nothing published there is dropped
    for (vhost, name), x in sorted(exchanges.items()):
        check(any(b[0] == vhost and b[1] == name and (vhost, b[2]) in queues for b in bindings),
              "exchange %s (vhost %s) has a queue bound" % (name, vhost),
              "definitions.json: exchange %s in vhost %s has no queue bound: what arrives is dropped"
              % (name, vhost))
    for pol in d.get("policies", []):
        for vhost, n in sorted(used):
            if vhost == pol["vhost"] and re.search(pol["pattern"], n) and not n.endswith(".q"):
                fail("policy %s pattern %r matches %r, which is not an ingress queue" % (pol["name"], pol["pattern"], n))
        dlx = pol["definition"].get("dead-letter-exchange")
        if dlx:
            check((pol["vhost"], dlx) in exchanges,
                  "policy %s (vhost %s): dead-letter exchange %s is declared" % (pol["name"], pol["vhost"], dlx),
                  "policy %s (vhost %s): dead-letter-exchange %s is not declared in that vhost"
                  % (pol["name"], pol["vhost"], dlx))
    # every ingress queue: a policy of its vhost dead-letters what the bridge rejects
    for vhost, q in sorted(ingress):
        check(any(pol["vhost"] == vhost and re.search(pol["pattern"], q)
                  and pol["definition"].get("dead-letter-exchange") for pol in d.get("policies", [])),
              "ingress queue %s (vhost %s) has a dead-letter policy" % (q, vhost),
              "definitions.json: no policy of vhost %s gives ingress queue %s a dead-letter-exchange "
              "(a message the bridge rejects would be dropped)" % (vhost, q))

    check_publisher_reach(d, configs, perms, vhosts, matches)


def retry_ingresses(cfg):
    """The ingress exchanges of cfg's retry routes."""
    return [r["ingress_exchange"] for r in cfg.get("routes", []) if r.get("retry")]


def stream_names(cfg):
    """cfg's replicated log's stream and lease queue (config.c's defaults), or []."""
    rep = (cfg.get("wal") or {}).get("replicate")
    if rep is None or rep is False:
        return []
    rep = rep if isinstance(rep, dict) else {}
    stream = rep.get("stream") or ("delay-bridge.wal" + ("." + cfg["instance"] if cfg.get("instance") else ""))
    return [stream, rep.get("lease_queue") or stream + ".lease"]


def markdown_examples(path):
    """The JSON objects in path's ```json blocks that parse (a whole config, a
    route or a fragment): every dict in them, depth first."""
    found = []

    def walk(v):
        if isinstance(v, dict):
            found.append(v)
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for block in re.findall(r"```json\n(.*?)```", open(path, encoding="utf-8").read(), re.S):
        try:
            walk(json.loads(block))
        except ValueError:
            pass  # a fragment with "..." in it
    return found


def check_publisher_reach(d, configs, perms, vhosts, matches):
    """What a publisher must not write, in every vhost of definitions.json:

    - amq.default: a publish there goes to any queue by name (the
      replication stream, the lease queue, a work queue: the retry's send
      back is exactly that, and the bridge's own);
    - a retry route's ingress exchange: whatever reaches it the bridge sends
      "back" to the queue its x-death names, so only the broker's own
      dead-lettering may put messages there -- and dead-lettering needs no
      permission (integration.definitions checks that on the broker);
    - the replication stream and its lease queue (write on a queue is what
      queue.bind and the stream protocol's publish check), and any exchange
      bound to them or to a retry ingress.

    Names come from every example configuration (deploy/examples/*.json,
    deploy/config.example.json, the ConfigMap), the READMEs' JSON examples
    and the defaults (delay-bridge.wal, delay-bridge.wal.lease); each is
    checked against every publisher of every vhost, not only its own: a name
    an example uses in one vhost is a name an operator uses in another."""
    publishers = sorted((u, v) for (u, v) in perms if u != BRIDGE_USER)
    check(publishers, "definitions.json: %d publisher permission(s) to check" % len(publishers),
          "definitions.json: no publisher permissions")
    # (name, where it comes from)
    names = [("amq.default", "the default exchange"),
             ("delay-bridge.wal", "the default wal.replicate.stream"),
             ("delay-bridge.wal.lease", "the default wal.replicate.lease_queue")]
    for label, cfg, _uris in configs:
        names += [(n, "%s: a retry route's ingress exchange" % label) for n in retry_ingresses(cfg)]
        names += [(n, "%s: the replicated log's stream / lease queue" % label) for n in stream_names(cfg)]
    for md in (os.path.join(ROOT, "README.md"), os.path.join(DEPLOY, "examples", "README.md"),
               os.path.join(DEPLOY, "rabbitmq", "README.md")):
        for obj in markdown_examples(md):
            if obj.get("retry") and obj.get("ingress_exchange"):
                names.append((obj["ingress_exchange"], "%s: a retry route's ingress exchange" % rel(md)))
            if "stream" in obj and isinstance(obj.get("stream"), str):
                names.append((obj["stream"], "%s: a wal.replicate.stream" % rel(md)))
    # exchanges bound (directly or through other exchanges) to what no publisher may write
    closed = {n for n, _ in names}
    grew = True
    while grew:
        grew = False
        for b in d.get("bindings", []):
            if b["destination"] in closed and b["source"] not in closed:
                closed.add(b["source"])
                names.append((b["source"], "definitions.json: an exchange bound to %s (vhost %s)"
                              % (b["destination"], b["vhost"])))
                grew = True
    seen = set()
    for user, vhost in publishers:
        w = perms[(user, vhost)]["write"]
        bad = []
        for n, why in names:
            if (n, user, vhost) in seen:
                continue
            seen.add((n, user, vhost))
            if matches(w, n):
                bad.append((n, why))
        for n, why in bad:
            fail("definitions.json: %s's write pattern %r on vhost %s matches %r (%s): a publisher "
                 "could put messages there%s" % (user, w, vhost, n, why,
                                                  "; name the retry route's ingress outside the "
                                                  "publishers' pattern (e.g. orders.retry)"
                                                  if "retry" in why else ""))
        if not bad:
            ok("definitions.json: %s on vhost %s writes none of amq.default, the retry ingresses, "
               "the replication streams and lease queues (%d names)" % (user, vhost, len(names)))


def uris_of(cfg, env_uri=None):
    if env_uri:
        return [u.strip() for u in env_uri.split(",")]
    u = cfg["broker"]["uri"]
    return u if isinstance(u, list) else [u]


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("DB_BRIDGE_BIN")
    objs = load_manifests()
    with tempfile.TemporaryDirectory() as tmp:
        res = check_kubernetes(objs, tmp)
        cm_cfg, cm_path, secret_uri = res

        configs = []  # (label, cfg, uris)
        files = [os.path.join(DEPLOY, "config.example.json")] + sorted(glob.glob(os.path.join(DEPLOY, "examples", "*.json")))
        check(len(files) >= 4, "%d example configurations" % len(files),
              "expected deploy/config.example.json and deploy/examples/*.json (minimal, order-closing, production)")
        for f in files:
            try:
                cfg = json.load(open(f))
            except ValueError as e:
                fail("%s: invalid JSON: %s" % (rel(f), e))
                continue
            configs.append((rel(f), cfg, uris_of(cfg)))
        if cm_cfg:
            configs.append(("ConfigMap config.json", cm_cfg, uris_of(cm_cfg)))
            if secret_uri:
                configs.append(("ConfigMap config.json + Secret URI", cm_cfg, uris_of(cm_cfg, secret_uri)))
            oc = os.path.join(DEPLOY, "examples", "order-closing.json")
            if os.path.exists(oc):
                check(json.load(open(oc))["routes"] == cm_cfg.get("routes"),
                      "ConfigMap routes are deploy/examples/order-closing.json's",
                      "ConfigMap config.json's routes differ from deploy/examples/order-closing.json's")

        if not binary or not os.access(binary, os.X_OK):
            fail("no delay-bridge binary to run --check-config (got %r); pass its path as the first "
                 "argument or set DB_BRIDGE_BIN" % binary)
        else:
            for f in files:
                check_config(binary, f, rel(f))
            if cm_path:
                check_config(binary, cm_path, "ConfigMap config.json (deploy/kubernetes/configmap.yaml)",
                             env_extra=K8S_SECRET)
                if secret_uri:
                    check_config(binary, cm_path, "ConfigMap config.json with the Secret's DELAY_BRIDGE_BROKER_URI",
                                 env_uri=secret_uri, env_extra=K8S_SECRET)
                if K8S_SECRET:
                    check_configmap_token(binary, cm_path, secret_uri)

        check_definitions(configs)

    print()
    if failures:
        print("test_manifests: %d check(s) failed:" % len(failures))
        for f in failures:
            print("  - " + f.splitlines()[0])
        return 1
    print("test_manifests: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
