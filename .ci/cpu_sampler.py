"""Where a CI run's CPU goes, by kind of process: ``python3 .ci/cpu_sampler.py OUT.json &`` before the run,
SIGTERM after it. Every 2 s it reads each process's CPU time from /proc; at the end it writes the machine's
busy fraction and the CPU-seconds per kind (Spark drivers, metastores, Thrift Servers, Python workers, ...).
A process that lives less than the interval is missed: the busy fraction counts it, the kinds do not."""
import json, os, signal, sys, time
HZ = os.sysconf("SC_CLK_TCK")
seen = {}  # pid -> (kind, cpu seconds, start)
stop = False
def end(*_):
    global stop; stop = True
signal.signal(signal.SIGTERM, end); signal.signal(signal.SIGINT, end)
def kind(cmd):
    c = " ".join(cmd)
    if not cmd: return "?"
    exe = os.path.basename(cmd[0])
    if exe == "java":
        for k, v in (("HiveMetaStore", "java:metastore"), ("LoopbackMetaStore", "java:metastore"), ("HiveThriftServer2", "java:thriftserver"),
                     ("SparkConnectServer", "java:connect-server"), ("CoarseGrainedExecutor", "java:executor"),
                     ("deploy.master", "java:standalone-master"), ("deploy.worker", "java:standalone-worker"),
                     ("beeline", "java:beeline"), ("BeeLine", "java:beeline"), ("SparkSubmit", "java:spark-submit"),
                     ("kerby", "java:kdc"), ("-Xshare:dump", "java:cds")):
            if k in c: return v
        return "java:other"
    if "pyspark.daemon" in c or "pyspark.worker" in c: return "py:spark-worker"
    if "from tributary_read.cli.main import main" in c: return "py:trib-fork-server"
    if "tributary_read.cli.main" in c: return "py:trib-cold"
    if len(cmd) > 2 and cmd[1:3] == ["-u", "-c"]: return "py:xdist-worker"
    if "pytest" in c: return "py:pytest"
    if "airflow" in c: return "py:airflow"
    if exe.startswith("python"): return "py:other " + (cmd[1][:40] if len(cmd) > 1 else "")
    return exe
t0 = time.time()
def cpu_total():
    f = open("/proc/stat").readline().split()[1:]
    v = list(map(int, f)); return sum(v), v[3] + v[4]
tot0, idle0 = cpu_total()
first = True
base = {}
while not stop:
    for d in os.listdir("/proc"):
        if not d.isdigit(): continue
        try:
            st = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
            cpu = (int(st[11]) + int(st[12])) / HZ
            pid = int(d)
            # read at every sample: a launcher script exec's its JVM under the same pid
            k = kind([x for x in open(f"/proc/{d}/cmdline").read().split("\0") if x])
            if pid not in seen or seen[pid][2] != st[19]:
                seen[pid] = [k, cpu, st[19]]
                if first: base[pid] = cpu
            else:
                seen[pid][:2] = [k, cpu]
        except (OSError, IndexError, ValueError):
            pass
    first = False
    time.sleep(2)
tot1, idle1 = cpu_total()
by = {}
for pid, (k, c, _) in seen.items():
    by[k] = by.get(k, 0) + c - base.get(pid, 0)
json.dump({"wall": time.time() - t0, "busy_fraction": 1 - (idle1 - idle0) / (tot1 - tot0),
           "by_kind": dict(sorted(by.items(), key=lambda x: -x[1]))}, open(sys.argv[1], "w"), indent=1)
