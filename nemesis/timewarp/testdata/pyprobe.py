"""pyprobe reports its clocks, one line per command on stdin:
now -> "<time.time_ns()> <time.monotonic_ns()>"."""
import sys
import time

print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "now":
        print(time.time_ns(), time.monotonic_ns(), flush=True)
    else:
        print("error unknown command", flush=True)
