"""The host's condition around a run: the quiet-host wait before it, the steal during it."""
import time

from .util import host_ticks, loadavg, log, steal_pct


def wait_quiet(quiet):
    """Waits up to quiet["max_s"] for the 1-minute load average to fall below quiet["load"] and
    the steal of the last look (5 s, then 10 s steps) below quiet["steal_pct"]. Returns what it
    saw: {"waited_s", "load", "steal_pct", "quiet": bool}. A run on a host that never got quiet
    still runs, with quiet=false recorded."""
    if quiet["max_s"] <= 0:  # no wait (smoke runs): the load is still recorded
        return {"waited_s": 0, "load": loadavg(), "steal_pct": None, "quiet": None}
    waited, step = 0, 5
    while True:
        a = host_ticks()
        time.sleep(step)
        steal = steal_pct(a, host_ticks())
        load = loadavg()
        quiet_now = load < quiet["load"] and steal < quiet["steal_pct"]
        waited += step
        if quiet_now or waited >= quiet["max_s"]:
            if not quiet_now:
                log(f"host not quiet after {waited} s (load {load}, steal {steal} %): running anyway, recorded")
            return {"waited_s": waited, "load": load, "steal_pct": steal, "quiet": quiet_now}
        step = 10
