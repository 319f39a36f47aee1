# Instructions executed between two points of a running binary, counted by single-stepping
# in gdb (no hardware counters needed): how far one call's fence is from the next call's
# first miss (BENCHMARKS.md, "What follows a fence"). Loaded into gdb, it adds the command
#
#   steps-to ADDR [ADDR ...]
#
# which single-steps from where the inferior stopped until the program counter is one of
# the ADDRs (at most 5,000 steps), then prints the count and the instructions per
# function. A session (run-time addresses: the binary's offsets plus its load base, which
# gdb keeps at 0x555555554000 for a PIE unless told otherwise):
#
#   gdb -q -batch -ex 'source scripts/gdb_steps.py' \
#       -ex 'break *0x5555555f243f' \
#       -ex 'run engine=cceh records=100000 option=segments=64 < commands.txt' \
#       -ex 'ignore 1 50' -ex continue -ex 'steps-to 0x5555555f1e5a 0x5555555f1e8d' \
#       build/release/pmhash-slices
#
# with commands.txt holding pmhash-slices lines (`run insert 0 100000`, `run delete 0 100`).
from collections import Counter

import gdb

MAX_STEPS = 5000


def _function_of(pc):
    text = gdb.execute("info symbol 0x%x" % pc, to_string=True)
    return text.split(" in section")[0].split(" + ")[0].strip()


class StepsTo(gdb.Command):
    """steps-to ADDR...: single-step until the pc is one of ADDRs; print the count."""

    def __init__(self):
        super().__init__("steps-to", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        stops = {int(a, 0) for a in arg.split()}
        if not stops:
            raise gdb.GdbError("steps-to: give one or more addresses")
        pcs = []
        while len(pcs) < MAX_STEPS:
            gdb.execute("stepi", to_string=True)
            pc = int(gdb.parse_and_eval("$pc"))
            pcs.append(pc)
            if pc in stops:
                break
        else:
            raise gdb.GdbError("steps-to: no stop address within %d steps" % MAX_STEPS)
        print("steps: %d" % len(pcs))
        for name, n in Counter(_function_of(pc) for pc in pcs).most_common():
            print("  %5d  %s" % (n, name))


StepsTo()
