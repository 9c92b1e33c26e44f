#!/usr/bin/env python3
"""Contract checks of the rendered tidemark chart (used by helm/test.sh).

  check_chart.py rendered RENDERED.yaml VALUES.yaml [VALUES.yaml...]
      Checks what SPEC.md section 4 and the chart's brief require of `helm template` output
      rendered with the given values files (later files override earlier ones): the
      StatefulSet (volumeClaimTemplates, Parallel, grace period, command line, env, probes,
      security context, /tmp emptyDir, Secret mounts), the Services, the ConfigMaps (no
      secrets in them), the PodDisruptionBudget and the optional monitoring resources.

  check_chart.py values-doc VALUES.yaml
      Every key in VALUES.yaml has a comment line right above it (block scalars skipped).

Exit 1 on any failure.
"""
import re
import sys

import yaml

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print(f"  FAIL: {msg}")


def merge(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def rendered(path, values_files):
    values = {}
    for f in values_files:
        values = merge(values, yaml.safe_load(open(f)) or {})
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    print(f"  rendered kinds: {', '.join(f'{k} x{len(v)}' for k, v in sorted(by_kind.items()))}")
    check("Secret" not in by_kind, "the chart must not create Secrets (existing Secret names only)")

    sts_list = by_kind.get("StatefulSet", [])
    check(len(sts_list) == 1, "exactly one StatefulSet")
    if not sts_list:
        return
    sts = sts_list[0]
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    check(spec.get("podManagementPolicy") == values["podManagementPolicy"], "podManagementPolicy from values")
    check(spec.get("replicas") == values["replicaCount"], "replicas from values")
    vct = spec.get("volumeClaimTemplates") or []
    check(len(vct) == 1 and vct[0]["metadata"]["name"] == "state", "one volumeClaimTemplate named state")
    if vct:
        req = vct[0]["spec"]["resources"]["requests"]["storage"]
        check(str(req) == str(values["persistence"]["size"]), "state volume size from values")
        sc = values["persistence"].get("storageClass", "")
        if sc and sc != "-":
            check(vct[0]["spec"].get("storageClassName") == sc, "storageClassName from values")
        elif not sc:
            check("storageClassName" not in vct[0]["spec"], "no storageClassName when empty (cluster default)")
    tgp = pod.get("terminationGracePeriodSeconds")
    check(tgp == values["terminationGracePeriodSeconds"] and tgp >= 30, "terminationGracePeriodSeconds from values, >= 30")
    headless = [s for s in by_kind.get("Service", []) if s["spec"].get("clusterIP") == "None"]
    check(len(headless) == 1 and spec.get("serviceName") == headless[0]["metadata"]["name"],
          "serviceName is the headless Service")
    metrics = [s for s in by_kind.get("Service", []) if s["spec"].get("clusterIP") != "None"]
    check(len(metrics) == 1 and any(p["name"] == "http" and p["port"] == values["metricsService"]["port"]
                                     for p in metrics[0]["spec"]["ports"]) if metrics else False,
          "metrics Service with a port named http")

    c = pod["containers"][0]
    cmd = c.get("command", []) + c.get("args", [])
    group = values["kafka"]["group"]
    port = values["http"]["port"]
    expected = ["tidemark", "run", "--topology", "/etc/tidemark/topology/topology.toml",
                "--state-dir", "/var/lib/tidemark", "--group", group, "--http-addr", f"0.0.0.0:{port}"]
    check(cmd[: len(expected)] == expected, f"command line starts {' '.join(expected)} (got {' '.join(cmd)})")
    kafka_secret = values["kafka"]["clientConfig"]["existingSecret"]
    has_kc = "--kafka-config" in cmd
    check(has_kc == bool(kafka_secret), "--kafka-config exactly when kafka.clientConfig.existingSecret is set")
    if has_kc:
        check(cmd[cmd.index("--kafka-config") + 1] == "/etc/tidemark/kafka/client.properties", "--kafka-config path")
    env = {e["name"]: e for e in c.get("env", [])}
    check(env.get("TIDEMARK_BOOTSTRAP", {}).get("value") == values["kafka"]["bootstrap"], "TIDEMARK_BOOTSTRAP from values")
    check(env.get("TIDEMARK_INSTANCE_ID", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name",
          "TIDEMARK_INSTANCE_ID from metadata.name")
    webhook_secret = values["webhook"]["signingKey"]["existingSecret"]
    if webhook_secret:
        check(env.get("TIDEMARK_WEBHOOK_SECRET_FILE", {}).get("value") == "/etc/tidemark/webhook/signing-key",
              "TIDEMARK_WEBHOOK_SECRET_FILE points to the mounted key")
    else:
        check("TIDEMARK_WEBHOOK_SECRET_FILE" not in env, "no TIDEMARK_WEBHOOK_SECRET_FILE without a Secret")
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    check(ports.get("http") == port, "container port http")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        g = c.get(probe, {}).get("httpGet", {})
        check(g.get("path") == path and g.get("port") in ("http", port), f"{probe} GET {path} on the HTTP port")
    sc = c.get("securityContext", {})
    psc = pod.get("securityContext", {})
    check(sc.get("runAsNonRoot") is True and sc.get("runAsUser") == 10001, "container runs as non-root UID 10001")
    check(sc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem")
    check(sc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation false")
    check(sc.get("capabilities", {}).get("drop") == ["ALL"], "capabilities drop ALL")
    check(psc.get("seccompProfile", {}).get("type") == "RuntimeDefault" or
          sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", "seccomp RuntimeDefault")
    check(c.get("resources", {}).get("requests"), "resource requests set")
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    check(mounts.get("/var/lib/tidemark", {}).get("name") == "state", "state volume at /var/lib/tidemark")
    check("emptyDir" in vols.get(mounts.get("/tmp", {}).get("name", ""), {}), "emptyDir at /tmp")
    topo = vols.get(mounts.get("/etc/tidemark/topology", {}).get("name", ""), {})
    check("configMap" in topo, "topology ConfigMap mounted at /etc/tidemark/topology")
    if kafka_secret:
        kv = vols.get(mounts.get("/etc/tidemark/kafka", {}).get("name", ""), {})
        check(kv.get("secret", {}).get("secretName") == kafka_secret, "Kafka client Secret mounted at /etc/tidemark/kafka")
        check(any(i["path"] == "client.properties" for i in kv.get("secret", {}).get("items", [])),
              "Kafka Secret key mounted as client.properties")
    if webhook_secret:
        wv = vols.get(mounts.get("/etc/tidemark/webhook", {}).get("name", ""), {})
        check(wv.get("secret", {}).get("secretName") == webhook_secret, "webhook Secret mounted at /etc/tidemark/webhook")
    for m in mounts.values():
        if m["mountPath"] not in ("/var/lib/tidemark", "/tmp"):
            check(m.get("readOnly") is True, f"{m['mountPath']} mounted read-only")

    cms = {cm["metadata"]["name"]: cm for cm in by_kind.get("ConfigMap", [])}
    topo_cm = cms.get(topo.get("configMap", {}).get("name"))
    check(topo_cm is not None and topo_cm["data"].get("topology.toml", "").strip() == values["topology"].strip(),
          "topology ConfigMap holds values.topology")
    for cm in cms.values():
        text = yaml.safe_dump(cm.get("data", {})).lower()
        check(not re.search(r"sasl\.password|ssl\.key\.password|secret\s*=", text),
              f"ConfigMap {cm['metadata']['name']} holds no secrets")
    dash = [cm for cm in cms.values() if cm["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    if values["dashboard"]["enabled"]:
        check(len(dash) == 1 and "tidemark.json" in dash[0]["data"], "Grafana dashboard ConfigMap labelled grafana_dashboard: \"1\"")
    else:
        check(not dash, "no dashboard ConfigMap when disabled")

    pdbs = by_kind.get("PodDisruptionBudget", [])
    if values["podDisruptionBudget"]["enabled"]:
        check(len(pdbs) == 1 and pdbs[0]["spec"].get("maxUnavailable") == values["podDisruptionBudget"]["maxUnavailable"],
              "PodDisruptionBudget maxUnavailable from values")
        if pdbs:
            check(pdbs[0]["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"], "PDB selects the pods")
    for kind, key in (("ServiceMonitor", "serviceMonitor"), ("PrometheusRule", "prometheusRule")):
        objs = by_kind.get(kind, [])
        if values[key]["enabled"]:
            check(len(objs) == 1 and objs[0]["apiVersion"] == "monitoring.coreos.com/v1", f"{kind} monitoring.coreos.com/v1 when enabled")
        else:
            check(not objs, f"no {kind} when disabled")
    for sm in by_kind.get("ServiceMonitor", []):
        ep = sm["spec"]["endpoints"][0]
        check(ep.get("port") == "http" and ep.get("path") == "/metrics", "ServiceMonitor scrapes port http /metrics")
        sel = sm["spec"]["selector"]["matchLabels"]
        check(metrics and all(metrics[0]["metadata"]["labels"].get(k) == v for k, v in sel.items()),
              "ServiceMonitor selects the metrics Service")
        hl = headless[0]["metadata"]["labels"] if headless else {}
        check(not all(hl.get(k) == v for k, v in sel.items()), "ServiceMonitor does not also select the headless Service")


def values_doc(path):
    lines = open(path).read().split("\n")
    block_indent = None
    prev = ""
    n = 0
    for i, line in enumerate(lines, 1):
        if block_indent is not None:
            if not line.strip() or len(line) - len(line.lstrip()) > block_indent:
                continue
            block_indent = None
        m = re.match(r"^(\s*)([A-Za-z_][\w.-]*):(\s|$)", line)
        if m:
            n += 1
            check(prev.lstrip().startswith("#"), f"{path}:{i}: key {m.group(2)!r} has no comment above it")
            if re.search(r":\s*[|>][-+]?\s*$", line):
                block_indent = len(m.group(1))
        if line.strip():
            prev = line
    print(f"  {n} keys documented")


def main(argv):
    if len(argv) >= 3 and argv[0] == "rendered":
        rendered(argv[1], argv[2:])
    elif len(argv) == 2 and argv[0] == "values-doc":
        values_doc(argv[1])
    else:
        print(__doc__)
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
