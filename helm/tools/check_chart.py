#!/usr/bin/env python3
"""Contract checks of the rendered tidemark chart (used by helm/test.sh).

  check_chart.py rendered RENDERED.yaml VALUES.yaml [VALUES.yaml...]
      Checks what SPEC.md section 4 and the chart's brief require of `helm template` output
      rendered with the given values files (later files override earlier ones): the
      StatefulSet (volumeClaimTemplates, Parallel, grace period, command line, env, probes,
      security context, /tmp emptyDir, Secret mounts), the Services, the ConfigMaps (no
      secrets in them), the PodDisruptionBudget and the optional monitoring resources; the
      optional micro-batch StatefulSet (its own volume, command line, probes, scraped, never
      selected by the stream's Services/PDB) and finance close CronJob (--business-day
      yesterday, concurrencyPolicy Forbid, a schedule after the cutoff); the admin listener
      (loopback unless exposed with a token Secret, never on the metrics Service), the probes
      (/startupz, the readiness bound), Secret checksum annotations, extra volumes, the
      optional NetworkPolicy and the `helm test` Pod; the optional snapshot volume (the
      existing ReadWriteMany claim mounted writable in the stream's pods only, the
      --snapshot-* flags, and the snapshot alerts with 3 x the interval); the partition
      assignment (staticAssignment true/false/auto: --replicas exactly when static,
      --session-timeout exactly when group-managed, the ownership alert's text saying which);
      standby tasks (TIDEMARK_STANDBYS from standbys, TIDEMARK_WARMUP_TIMEOUT with any, never
      with static assignment, the TidemarkStandbyBehind alert exactly with all).

  check_chart.py assignment RENDERED.yaml static|group [SESSION_TIMEOUT]
      The stream's command line is that of the named mode, independently of any values file:
      static passes `--replicas <spec.replicas>` and no --session-timeout; group passes no
      --replicas and `--session-timeout SESSION_TIMEOUT` (any value when not given).

  check_chart.py flags RENDERED.yaml TIDEMARK
      Every --flag the rendered containers pass to tidemark is listed by
      `TIDEMARK <subcommand> --help`.

  check_chart.py values-doc VALUES.yaml
      Every key in VALUES.yaml has a comment line right above it (block scalars skipped).

Exit 1 on any failure.
"""
import datetime
import re
import subprocess
import sys
import tomllib
import zoneinfo

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

    component = lambda d: d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")
    sts_list = [d for d in by_kind.get("StatefulSet", []) if component(d) == "stream"]
    check(len(sts_list) == 1, "exactly one StatefulSet with pods labelled app.kubernetes.io/component: stream")
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
    headless = [s for s in by_kind.get("Service", []) if s["spec"].get("clusterIP") == "None"
                and s["spec"]["selector"].get("app.kubernetes.io/component") == "stream"]
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
    container_basics(c, pod, "stream")
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
    snap = values.get("snapshots", {})
    writable = ("/var/lib/tidemark", "/tmp", snap["mountPath"] if snap.get("enabled") else None)
    for m in mounts.values():
        if m["mountPath"] not in writable:
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
            check(matches(pdbs[0]["spec"]["selector"]["matchLabels"], spec["template"]["metadata"]["labels"]),
                  "PDB selects the stream's pods")
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

    workloads(values, by_kind, sts, topo, vols, mounts)
    operations(values, by_kind, sts, metrics[0] if metrics else None)
    snapshots(values, by_kind, sts)
    assignment(values, by_kind, sts)
    standbys(values, by_kind, sts)


def static_assignment(values):
    """staticAssignment as the chart reads it: a bool, or "auto" (static without snapshots
    and without standbys)."""
    v = values.get("staticAssignment", "auto")
    if isinstance(v, bool):
        return v
    check(v == "auto", f"staticAssignment is auto, true or false (got {v!r})")
    return not values.get("snapshots", {}).get("enabled") and standby_mode(values) == "none"


def standby_mode(values):
    """standbys as --standbys gets it: all, a number of copies, or none; auto is 1 with
    snapshots (staticAssignment not true), none without."""
    v = str(values.get("standbys", "auto"))
    if v == "auto":
        on = values.get("snapshots", {}).get("enabled") and values.get("staticAssignment", "auto") is not True
        return "1" if on else "none"
    return "none" if v == "0" else v


def assignment_args(sts, mode, timeout=None):
    """The stream's args pass --replicas (static) or --session-timeout (group), not both."""
    args = sts["spec"]["template"]["spec"]["containers"][0].get("args", [])
    arg = lambda flag: args[args.index(flag) + 1] if flag in args else None
    n = sts["spec"].get("replicas")
    if mode == "static":
        check(arg("--replicas") == str(n), f"static assignment: --replicas {n} (the StatefulSet's replicas; got {arg('--replicas')})")
        check("--session-timeout" not in args, "static assignment: no --session-timeout (used by group-managed assignment only)")
    else:
        check("--replicas" not in args, f"group-managed assignment: no --replicas (got --replicas {arg('--replicas')})")
        check(arg("--session-timeout") is not None and (timeout is None or arg("--session-timeout") == timeout),
              f"group-managed assignment: --session-timeout {timeout or 'VALUE'} (got {arg('--session-timeout')})")


def assignment(values, by_kind, sts):
    """--replicas exactly when static (staticAssignment true, or auto without snapshots);
    --session-timeout sessionTimeout exactly when group-managed; the ownership alert says which."""
    static = static_assignment(values)
    assignment_args(sts, "static" if static else "group", None if static else str(values["sessionTimeout"]))
    rules = {r.get("alert"): r for pr in by_kind.get("PrometheusRule", []) for g in pr["spec"]["groups"] for r in g["rules"]}
    unowned = rules.get("TidemarkPartitionUnowned", {}).get("annotations", {}).get("description", "")
    if values["prometheusRule"]["enabled"]:
        want = f"--replicas {values['replicaCount']}" if static else f"sessionTimeout ({values['sessionTimeout']})"
        check(want in unowned, f"TidemarkPartitionUnowned's description names the assignment mode ({want!r})")
    for d in by_kind.get("StatefulSet", []) + by_kind.get("CronJob", []):
        if d is sts:
            continue
        spec = d["spec"]["jobTemplate"]["spec"] if d["kind"] == "CronJob" else d["spec"]
        for x in spec["template"]["spec"]["containers"]:
            check(not {"--replicas", "--session-timeout"} & set(x.get("args", [])),
                  f"{d['metadata']['name']}: no --replicas / --session-timeout (stream only)")


def standbys(values, by_kind, sts):
    """TIDEMARK_STANDBYS from standbys on the stream only, TIDEMARK_WARMUP_TIMEOUT exactly with
    standbys on, standbys never with static assignment, and TidemarkStandbyBehind exactly with
    standbys on."""
    mode = standby_mode(values)
    on = mode != "none"
    c = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    check(env.get("TIDEMARK_STANDBYS") == mode, f"TIDEMARK_STANDBYS {mode} (got {env.get('TIDEMARK_STANDBYS')})")
    if on:
        check(env.get("TIDEMARK_WARMUP_TIMEOUT") == str(values["warmupTimeout"]),
              f"TIDEMARK_WARMUP_TIMEOUT {values['warmupTimeout']} (got {env.get('TIDEMARK_WARMUP_TIMEOUT')})")
        check("--replicas" not in c.get("args", []), f"standbys {mode}: group-managed (no --replicas; tidemark refuses both)")
    else:
        check("TIDEMARK_WARMUP_TIMEOUT" not in env, "no TIDEMARK_WARMUP_TIMEOUT without standbys")
    rules = {r.get("alert") for pr in by_kind.get("PrometheusRule", []) for g in pr["spec"]["groups"] for r in g["rules"]}
    if values["prometheusRule"]["enabled"]:
        check(("TidemarkStandbyBehind" in rules) == on, "TidemarkStandbyBehind exactly when standbys are on")
    for d in by_kind.get("StatefulSet", []) + by_kind.get("CronJob", []):
        if d is sts:
            continue
        spec = d["spec"]["jobTemplate"]["spec"] if d["kind"] == "CronJob" else d["spec"]
        for x in spec["template"]["spec"]["containers"]:
            check(not {"TIDEMARK_STANDBYS", "TIDEMARK_WARMUP_TIMEOUT"} & {e["name"] for e in x.get("env", [])},
                  f"{d['metadata']['name']}: no TIDEMARK_STANDBYS / TIDEMARK_WARMUP_TIMEOUT (stream only)")


def snapshots(values, by_kind, sts):
    """The snapshot volume: an existing RWX claim, mounted writable in the stream's pods only."""
    snap = values.get("snapshots", {})
    on = bool(snap.get("enabled"))
    pod = sts["spec"]["template"]["spec"]
    c = pod["containers"][0]
    args = c.get("args", [])
    arg = lambda flag: args[args.index(flag) + 1] if flag in args else None
    flags = ("--snapshot-dir", "--snapshot-interval", "--snapshot-keep")
    url = snap.get("url") or ""
    secret = (snap.get("s3") or {}).get("existingSecret") or ""
    env_from = [e.get("secretRef", {}).get("name") for e in c.get("envFrom", [])]
    if on:
        want_dir = url or snap["mountPath"]
        check(arg("--snapshot-dir") == want_dir, f"--snapshot-dir {want_dir} (got {arg('--snapshot-dir')})")
        check(arg("--snapshot-interval") == str(snap["interval"]), "--snapshot-interval from snapshots.interval")
        check(arg("--snapshot-keep") == str(snap["keep"]), "--snapshot-keep from snapshots.keep")
        check((secret in env_from) if secret else not env_from,
              "the snapshot store's Secret (snapshots.s3.existingSecret) as envFrom exactly when set")
        vols = {v["name"]: v for v in pod.get("volumes", [])}
        if url:
            check("snapshots" not in vols and not any(m["name"] == "snapshots" for m in c.get("volumeMounts", [])),
                  "no snapshot claim mounted when snapshots.url is set")
        else:
            mount = [m for m in c.get("volumeMounts", []) if m["mountPath"] == snap["mountPath"]]
            check(len(mount) == 1 and not mount[0].get("readOnly"), f"snapshot volume mounted writable at {snap['mountPath']}")
            vol = vols.get(mount[0]["name"], {}) if mount else {}
            check(vol.get("persistentVolumeClaim", {}).get("claimName") == snap["existingClaim"] and snap["existingClaim"],
                  "snapshot volume is the existing claim snapshots.existingClaim (shared, not per pod)")
        check(all(t["metadata"]["name"] == "state" for t in sts["spec"].get("volumeClaimTemplates", [])),
              "no volumeClaimTemplate for snapshots (one claim shared by every pod)")
    else:
        check(not any(f in args for f in flags), "no --snapshot-* flag when snapshots.enabled is false")
        check(not any(v["name"] == "snapshots" for v in pod.get("volumes", [])), "no snapshot volume when disabled")
        check(not env_from, "no snapshot store Secret when disabled")
    for d in by_kind.get("StatefulSet", []) + by_kind.get("CronJob", []):
        if d is sts:
            continue
        spec = d["spec"]["jobTemplate"]["spec"] if d["kind"] == "CronJob" else d["spec"]
        for x in spec["template"]["spec"]["containers"]:
            check(not any(f in x.get("args", []) for f in flags), f"{d['metadata']['name']}: no --snapshot-* flag (stream only)")
        check(not any(v["name"] == "snapshots" for v in spec["template"]["spec"].get("volumes", [])),
              f"{d['metadata']['name']}: no snapshot volume (stream only)")
    rules = {r.get("alert"): r for pr in by_kind.get("PrometheusRule", []) for g in pr["spec"]["groups"] for r in g["rules"]}
    if values["prometheusRule"]["enabled"]:
        names = ("TidemarkSnapshotStale", "TidemarkSnapshotFailing", "TidemarkSnapshotStoreFailing", "TidemarkSnapshotLagging")
        check(all((n in rules) == on for n in names), "snapshot alerts exactly when snapshots.enabled")
        interval = minutes(str(snap.get("interval", "")))
        if on and interval is not None and "TidemarkSnapshotStale" in rules:
            stale = round(interval * 60 * 3)
            check(re.search(rf"> {stale}\b", rules["TidemarkSnapshotStale"]["expr"]) is not None,
                  f"TidemarkSnapshotStale fires above 3 x snapshots.interval = {stale} s")


def operations(values, by_kind, sts, metrics_svc):
    """Admin listener, probes, Secret checksums, extra volumes, NetworkPolicy, helm test."""
    tmpl = sts["spec"]["template"]
    pod = tmpl["spec"]
    c = pod["containers"][0]
    args = c.get("args", [])
    arg = lambda flag: args[args.index(flag) + 1] if flag in args else None
    admin = values["admin"]
    expose = admin["expose"]
    token_secret = admin["token"]["existingSecret"]
    host = "0.0.0.0" if expose else "127.0.0.1"
    check(arg("--admin-addr") == f"{host}:{admin['port']}", f"--admin-addr {host}:{admin['port']} (got {arg('--admin-addr')})")
    check(not expose or token_secret, "an exposed admin listener has a token Secret")
    check((arg("--admin-token-file") == "/etc/tidemark/admin/token") == bool(token_secret),
          "--admin-token-file /etc/tidemark/admin/token exactly when admin.token.existingSecret is set")
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    if token_secret:
        tv = vols.get(mounts.get("/etc/tidemark/admin", ""), {})
        check(tv.get("secret", {}).get("secretName") == token_secret, "admin token Secret mounted at /etc/tidemark/admin")
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    check(("admin" in ports) == expose and (not expose or ports["admin"] == admin["port"]),
          "container port admin exactly when admin.expose")
    if metrics_svc:
        check(all(p.get("targetPort") != "admin" and p.get("port") != admin["port"] for p in metrics_svc["spec"]["ports"]),
              "the metrics Service never exposes the admin port")
    check(arg("--ready-max-lag-seconds") == str(values["probes"]["readiness"]["maxLagSeconds"]),
          "--ready-max-lag-seconds from probes.readiness.maxLagSeconds")
    if values["probes"]["startup"]["enabled"]:
        check(c.get("startupProbe", {}).get("httpGet", {}).get("path") == "/startupz", "startupProbe GET /startupz")
    else:
        check("startupProbe" not in c, "no startupProbe when disabled")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        check("maxLagSeconds" not in c.get(probe, {}), f"{probe} carries no chart-only keys")

    annotations = tmpl["metadata"].get("annotations", {})
    kafka_secret = values["kafka"]["clientConfig"]["existingSecret"]
    check(("checksum/secret-kafka-client" in annotations) == bool(kafka_secret),
          "checksum/secret-kafka-client annotation exactly when the Kafka client Secret is referenced")
    for v in values.get("extraVolumes", []):
        if v.get("secret") or v.get("configMap"):
            check(f"checksum/volume-{v['name']}" in annotations, f"checksum/volume-{v['name']} annotation (extraVolumes)")
    # Re-read while running: a rotation must not restart the pods.
    check(not any(k in annotations for k in ("checksum/secret-webhook-signing-key", "checksum/secret-admin-token")),
          "no checksum on the live-reloaded webhook key and admin token")
    check("checksum/topology" in annotations, "checksum/topology annotation")

    workload_containers = [(sts["metadata"]["name"], c)]
    for d in by_kind.get("StatefulSet", []) + by_kind.get("CronJob", []):
        spec = d["spec"]["jobTemplate"]["spec"] if d["kind"] == "CronJob" else d["spec"]
        if d is not sts:
            workload_containers += [(d["metadata"]["name"], x) for x in spec["template"]["spec"]["containers"]]
    for want in values.get("extraVolumeMounts", []):
        for name, x in workload_containers:
            check(any(m["name"] == want["name"] and m["mountPath"] == want["mountPath"] for m in x.get("volumeMounts", [])),
                  f"{name}: extraVolumeMount {want['mountPath']}")
    for want in values.get("extraVolumes", []):
        check(want["name"] in vols, f"extraVolume {want['name']} in the stream's pod")

    nps = by_kind.get("NetworkPolicy", [])
    np_values = values["networkPolicy"]
    if np_values["enabled"]:
        check(len(nps) == 1, "one NetworkPolicy when enabled")
        if nps:
            spec = nps[0]["spec"]
            check(matches(spec["podSelector"]["matchLabels"], tmpl["metadata"]["labels"]), "NetworkPolicy selects the stream's pods")
            check(spec.get("policyTypes") == ["Ingress"], "NetworkPolicy restricts ingress only")
            rules = spec.get("ingress", [])
            by_port = {r["ports"][0]["port"]: r for r in rules}
            check("http" in by_port, "NetworkPolicy admits the HTTP port")
            check(len(rules) == 1 + bool(expose and np_values["adminFrom"]), "NetworkPolicy opens no other port")
            if "admin" in by_port:
                check(by_port["admin"].get("from"), "the admin port is open to adminFrom only")
    else:
        check(not nps, "no NetworkPolicy when disabled")

    tests = [d for d in by_kind.get("Pod", []) if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    check(len(tests) == 1, "one helm test hook Pod")
    for t in tests:
        script = " ".join(" ".join(x.get("command", []) + x.get("args", [])) for x in t["spec"]["containers"])
        check("/readyz" in script and "/metrics" in script, "the helm test checks /readyz and /metrics")
        check(t["spec"].get("restartPolicy") == "Never", "the helm test Pod never restarts")
        check(t["spec"]["containers"][0].get("securityContext", {}).get("runAsNonRoot") is True, "the helm test runs as non-root")


def matches(selector, labels):
    """An equality-based selector (matchLabels / Service selector) selects these labels."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def minutes(text):
    """A humantime duration of h/m/s parts, in minutes (None when it has other units)."""
    total, rest = 0.0, text.replace(" ", "")
    for num, unit in re.findall(r"(\d+)(h|m|s)", rest):
        total += int(num) * {"h": 60, "m": 1, "s": 1 / 60}[unit]
    return total if re.fullmatch(r"(\d+(h|m|s))+", rest) else None


def workloads(values, by_kind, sts, topo_vol, stream_vols, stream_mounts):
    """The optional micro-batch StatefulSet and finance close CronJob."""
    stream_pod = sts["spec"]["template"]
    stream_c = stream_pod["spec"]["containers"][0]
    port = values["http"]["port"]
    kafka_secret = values["kafka"]["clientConfig"]["existingSecret"]
    topology = tomllib.loads(values["topology"])
    stream_labels = stream_pod["metadata"]["labels"]

    def pod_common(pod_spec, c, what, state):
        """Same image, topology ConfigMap, Kafka settings and Secret as the stream."""
        container_basics(c, pod_spec, what)
        check(c.get("image") == stream_c.get("image"), f"{what}: the stream's image")
        check(pod_spec.get("serviceAccountName") == stream_pod["spec"].get("serviceAccountName"),
              f"{what}: the stream's ServiceAccount")
        env = {e["name"]: e for e in c.get("env", [])}
        check(env.get("TIDEMARK_BOOTSTRAP", {}).get("value") == values["kafka"]["bootstrap"],
              f"{what}: TIDEMARK_BOOTSTRAP from values")
        check("TIDEMARK_INSTANCE_ID" not in env, f"{what}: no TIDEMARK_INSTANCE_ID (not a group member)")
        cmd = c.get("command", []) + c.get("args", [])
        check(("--kafka-config" in cmd) == bool(kafka_secret), f"{what}: --kafka-config exactly when the Kafka Secret is set")
        if "--kafka-config" in cmd:
            check(cmd[cmd.index("--kafka-config") + 1] == "/etc/tidemark/kafka/client.properties", f"{what}: --kafka-config path")
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        vols = {v["name"]: v for v in pod_spec.get("volumes", [])}
        topo = vols.get(mounts.get("/etc/tidemark/topology", {}).get("name", ""), {})
        check(topo.get("configMap") == topo_vol.get("configMap"), f"{what}: the stream's topology ConfigMap")
        check("emptyDir" in vols.get(mounts.get("/tmp", {}).get("name", ""), {}), f"{what}: emptyDir at /tmp")
        if kafka_secret:
            kv = vols.get(mounts.get("/etc/tidemark/kafka", {}).get("name", ""), {})
            sv = stream_vols.get(stream_mounts.get("/etc/tidemark/kafka", {}).get("name", ""), {})
            check(kv.get("secret") and kv.get("secret") == sv.get("secret"), f"{what}: the stream's Kafka client Secret")
        check("/etc/tidemark/webhook" not in mounts, f"{what}: no webhook signing key (sends no actions)")
        check(("/var/lib/tidemark" in mounts) == state, f"{what}: state volume at /var/lib/tidemark" if state else f"{what}: no state volume")
        for m in mounts.values():
            if m["mountPath"] not in ("/var/lib/tidemark", "/tmp"):
                check(m.get("readOnly") is True, f"{what}: {m['mountPath']} mounted read-only")
        return cmd

    pods = {"stream": stream_labels}
    mb_all = [d for d in by_kind.get("StatefulSet", []) if d is not sts]
    mbv = values.get("microbatch", {})
    if not mbv.get("enabled"):
        check(not mb_all, "no micro-batch StatefulSet when microbatch.enabled is false")
    else:
        check(len(mb_all) == 1, "one micro-batch StatefulSet when microbatch.enabled")
    for mb in mb_all[:1]:
        what = "micro-batch"
        tmpl = mb["spec"]["template"]
        labels = tmpl["metadata"]["labels"]
        pods["microbatch"] = labels
        check(labels.get("app.kubernetes.io/component") == "microbatch", f"{what}: pods labelled component microbatch")
        check(mb["spec"].get("replicas") == 1, f"{what}: one replica")
        check(matches(mb["spec"]["selector"]["matchLabels"], labels) and not matches(mb["spec"]["selector"]["matchLabels"], stream_labels),
              f"{what}: its selector selects its pod and not the stream's")
        vct = mb["spec"].get("volumeClaimTemplates") or []
        check(len(vct) == 1 and vct[0]["metadata"]["name"] == "state"
              and str(vct[0]["spec"]["resources"]["requests"]["storage"]) == str(mbv["persistence"]["size"]),
              f"{what}: its own volumeClaimTemplate state, size from values")
        check(tmpl["spec"].get("terminationGracePeriodSeconds") == mbv["terminationGracePeriodSeconds"],
              f"{what}: terminationGracePeriodSeconds from values")
        c = tmpl["spec"]["containers"][0]
        cmd = pod_common(tmpl["spec"], c, what, state=True)
        expected = ["tidemark", "microbatch", "--topology", "/etc/tidemark/topology/topology.toml",
                    "--state-dir", "/var/lib/tidemark", "--every", str(mbv["every"]), "--deadline", str(mbv["deadline"]),
                    "--max-slice-records", str(mbv["maxSliceRecords"]), "--http-addr", f"0.0.0.0:{port}"]
        check(cmd[: len(expected)] == expected, f"{what}: command line starts {' '.join(expected)} (got {' '.join(cmd)})")
        for flag, key in (("--dashboard-topic", "dashboardTopic"), ("--finance-topic", "financeTopic")):
            want = mbv.get(key, "")
            got = cmd[cmd.index(flag) + 1] if flag in cmd else ""
            check(got == want, f"{what}: {flag} exactly from microbatch.{key}")
        check(("--no-side-outputs" in cmd) == (not mbv["sideOutputs"]), f"{what}: --no-side-outputs exactly when sideOutputs is false")
        if values["replicaCount"] > 0:
            check(mbv.get("dashboardTopic") and mbv.get("financeTopic") and not mbv["sideOutputs"],
                  f"{what}: beside a running stream (these values), own dashboard/finance topics and no side outputs")
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        check(ports.get("http") == port, f"{what}: container port http")
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            g = c.get(probe, {}).get("httpGet", {})
            check(g.get("path") == path and g.get("port") in ("http", port), f"{what}: {probe} GET {path} on the HTTP port")
        lp = c.get("livenessProbe", {})
        tolerated = 60 + lp.get("periodSeconds", 0) * lp.get("failureThreshold", 0)
        deadline = minutes(str(mbv["deadline"]))
        if deadline is not None:
            check(tolerated > deadline * 60, f"{what}: liveness tolerates a slice as long as the deadline "
                  f"(60 s + period x threshold = {tolerated} s, deadline {deadline * 60:.0f} s)")
        svcs = [s for s in by_kind.get("Service", []) if matches(s["spec"].get("selector", {}), labels)]
        check(len(svcs) == 1 and svcs[0]["metadata"]["name"] == mb["spec"].get("serviceName"),
              f"{what}: exactly one Service selects its pod, its governing Service")
        for sm in by_kind.get("ServiceMonitor", []):
            sel = sm["spec"]["selector"]["matchLabels"]
            check(svcs and matches(sel, svcs[0]["metadata"]["labels"])
                  and any(p.get("name") == "http" for p in svcs[0]["spec"]["ports"]),
                  f"{what}: the ServiceMonitor scrapes its pod (Service port http)")
        if not values["serviceMonitor"]["enabled"]:
            check(svcs and svcs[0]["spec"].get("publishNotReadyAddresses") is True, f"{what}: metrics Service publishes not-ready pods")

    cj_all = by_kind.get("CronJob", [])
    fcv = values.get("financeClose", {})
    if not fcv.get("enabled"):
        check(not cj_all, "no CronJob when financeClose.enabled is false")
    else:
        check(len(cj_all) == 1, "one finance close CronJob when financeClose.enabled")
    for cj in cj_all[:1]:
        what = "finance close"
        spec = cj["spec"]
        job = spec["jobTemplate"]["spec"]
        tmpl = job["template"]
        labels = tmpl["metadata"]["labels"]
        pods["finance-close"] = labels
        check(labels.get("app.kubernetes.io/component") == "finance-close", f"{what}: pods labelled component finance-close")
        check(spec.get("concurrencyPolicy") == "Forbid", f"{what}: concurrencyPolicy Forbid")
        check(spec.get("schedule") == fcv["schedule"], f"{what}: schedule from values")
        check(spec.get("timeZone", "") == fcv["timeZone"], f"{what}: timeZone from values (absent when empty)")
        check(job.get("backoffLimit") == fcv["backoffLimit"], f"{what}: backoffLimit from values")
        check(tmpl["spec"].get("restartPolicy") == "OnFailure", f"{what}: restartPolicy OnFailure")
        c = tmpl["spec"]["containers"][0]
        cmd = pod_common(tmpl["spec"], c, what, state=False)
        expected = ["tidemark", "batch", "close", "--topology", "/etc/tidemark/topology/topology.toml"]
        check(cmd[: len(expected)] == expected, f"{what}: command line starts {' '.join(expected)} (got {' '.join(cmd)})")
        check("--business-day" in cmd and cmd[cmd.index("--business-day") + 1] == "yesterday", f"{what}: --business-day yesterday")
        check("--grace" in cmd and cmd[cmd.index("--grace") + 1] == str(fcv["grace"]), f"{what}: --grace from values")
        check(("--allow-empty" in cmd) == bool(fcv["allowEmpty"]), f"{what}: --allow-empty exactly when allowEmpty")
        # The job must start after the default cutoff (end of yesterday + grace, in the finance
        # time zone): a cutoff in the future is refused. Without a timeZone, assume UTC.
        fin_tz = topology.get("finance", {}).get("time_zone", "Asia/Tokyo")
        m = re.fullmatch(r"(\d+) (\d+) \* \* \*", fcv["schedule"])
        grace = minutes(str(fcv["grace"]))
        if m and grace is not None:
            when = datetime.datetime(2026, 11, 30, int(m.group(2)), int(m.group(1)),
                                     tzinfo=zoneinfo.ZoneInfo(fcv["timeZone"] or "UTC"))
            local = when.astimezone(zoneinfo.ZoneInfo(fin_tz))
            after_midnight = local.hour * 60 + local.minute
            check(after_midnight > grace, f"{what}: starts at {local:%H:%M} {fin_tz}, after the cutoff "
                  f"(end of yesterday + {fcv['grace']})")
        if fcv["timeZone"]:
            check(fcv["timeZone"] == fin_tz, f"{what}: timeZone {fcv['timeZone']} = the topology's finance.time_zone {fin_tz}")

    # Selectors: each Service and PDB selects the pods of one workload only (the micro-batch
    # StatefulSet's governing Service its pod, every other one the stream's pods).
    mb_services = {d["spec"].get("serviceName") for d in mb_all}
    for obj in by_kind.get("Service", []) + by_kind.get("PodDisruptionBudget", []):
        sel = obj["spec"].get("selector", {})
        sel = sel.get("matchLabels", sel) if obj["kind"] == "PodDisruptionBudget" else sel
        hit = sorted(k for k, labels in pods.items() if matches(sel, labels))
        want = ["microbatch" if obj["metadata"]["name"] in mb_services else "stream"]
        check(hit == want, f"{obj['kind']} {obj['metadata']['name']} selects only {want[0]} pods (selects {hit})")
    aff = stream_pod["spec"].get("affinity", {}).get("podAntiAffinity", {})
    for term in aff.get("preferredDuringSchedulingIgnoredDuringExecution", []):
        sel = term["podAffinityTerm"]["labelSelector"].get("matchLabels", {})
        check(sorted(k for k, labels in pods.items() if matches(sel, labels)) == ["stream"],
              "the stream's default anti-affinity spreads stream pods only")


def flags(path, tidemark):
    """Every --flag passed to tidemark exists in its --help."""
    helps = {}
    for d in yaml.safe_load_all(open(path)):
        if not d or d["kind"] not in ("StatefulSet", "CronJob"):
            continue
        spec = d["spec"]["jobTemplate"]["spec"] if d["kind"] == "CronJob" else d["spec"]
        for c in spec["template"]["spec"]["containers"]:
            args = c.get("args", [])
            sub = args[:2] if args[:1] == ["batch"] else args[:1]
            key = " ".join(sub)
            if key not in helps:
                out = subprocess.run([tidemark, *sub, "--help"], capture_output=True, text=True)
                check(out.returncode == 0, f"tidemark {key} --help runs")
                helps[key] = out.stdout
            for a in args:
                if a.startswith("--"):
                    check(re.search(rf"(^|\s){re.escape(a)}(\s|=|,|$)", helps[key], re.M) is not None,
                          f"{d['metadata']['name']}: tidemark {key} accepts {a}")
            print(f"  {d['metadata']['name']}: tidemark {key}, {sum(a.startswith('--') for a in args)} flags")


def container_basics(c, pod, what):
    sc = c.get("securityContext", {})
    psc = pod.get("securityContext", {})
    check(sc.get("runAsNonRoot") is True and sc.get("runAsUser") == 10001, f"{what}: container runs as non-root UID 10001")
    check(sc.get("readOnlyRootFilesystem") is True, f"{what}: readOnlyRootFilesystem")
    check(sc.get("allowPrivilegeEscalation") is False, f"{what}: allowPrivilegeEscalation false")
    check(sc.get("capabilities", {}).get("drop") == ["ALL"], f"{what}: capabilities drop ALL")
    check(psc.get("seccompProfile", {}).get("type") == "RuntimeDefault" or
          sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{what}: seccomp RuntimeDefault")
    check(c.get("resources", {}).get("requests"), f"{what}: resource requests set")


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
    elif len(argv) in (3, 4) and argv[0] == "assignment" and argv[2] in ("static", "group"):
        docs = [d for d in yaml.safe_load_all(open(argv[1])) if d]
        sts = [d for d in docs if d["kind"] == "StatefulSet"
               and d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == "stream"]
        check(len(sts) == 1, "exactly one stream StatefulSet")
        if sts:
            assignment_args(sts[0], argv[2], argv[3] if len(argv) == 4 else None)
            args = sts[0]["spec"]["template"]["spec"]["containers"][0].get("args", [])
            print(f"  {argv[2]}: {' '.join(a for a in args if a.startswith('--'))}")
    elif len(argv) == 3 and argv[0] == "flags":
        flags(argv[1], argv[2])
    elif len(argv) == 2 and argv[0] == "values-doc":
        values_doc(argv[1])
    else:
        print(__doc__)
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
