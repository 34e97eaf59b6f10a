"""Run-vs-run and rank-vs-rank attribution: why did step time change?

Algorithm:
1. Match ranks: the same rank ids when both runs have them; a single rank against a single rank
   otherwise (with a note); for rank-vs-rank, rank A of a profile against rank B of the same profile.
2. Step time and breakdown: per-step means over the matched ranks' kept steps (or one chosen step),
   so runs with different step counts compare fairly; delta = target − base. Besides compute,
   communication (not overlapped) and free, two remainders are kept so that the dimensions add up to
   the step: memory (device busy with neither: copies, memsets, syncs) and host (step time outside the
   device window: host-only lead-in and tail).
3. Op deltas, per step and per matched rank:
     kernel — device ops grouped by name, or by (op type, input shapes) on Ascend (msprof-analyze's
              KernelCompare key), falling back to op type when the names do not match one to one;
     op     — framework ops on the host (aten::, npu::, annotations);
     api    — runtime / CANN API calls (the dispatch side);
     comm   — communication ops by type and group, with bandwidth where recorded;
   ops present on one side only appear with 0 on the other. Counts and times are per step.
4. Environment, configuration and findings: variables that differ, world size / device / versions,
   and the findings new in the target or gone from it.
5. Verdict: the dimension (compute / communication / free / memory / host) whose per-step delta is
   largest, and the change of that dimension's kind that explains most of it, with a fix id when a new
   finding maps to one. Collectives synchronise ranks: when one rank's own work (step minus
   communication) grows, its peers wait for it inside the next collective, so the mean communication
   time grows although no link got slower; the verdict then names that rank and its own dimension.
   When the step time barely moved, configuration changes and new findings lead instead.

Cross-vendor (Kineto GPU vs Ascend): names differ, so device ops are compared by family (matmul,
attention, vector, communication, memory, other) and the result says so. Every device op of a step
counts there, as in msprof-analyze's NPU-vs-GPU compare, not only those whose launch is in the step
(HTA's rule, kept for same-vendor Kineto diffs).
"""

