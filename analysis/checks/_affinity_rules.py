"""affinity-api's rules and matcher: the fused-API rule table, the first-level op filter and the sequence search.

The rule set and the matching semantics are described in affinity_api.py's module docstring; this module holds
the data and the pure functions over host-op frames, so the check module keeps only the query and the findings.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class AffinityRule:
    api: str  # the replacement API (Finding.subject)
    patterns: tuple[str, ...]  # op-name sequences, `-` separated, with `(a|b){m,n}` elements
    since_cann: str  # CANN version whose rule set added it
    torch: tuple[str, ...]  # torch versions the rule set names
    default: bool = True  # applied without extra knowledge of the environment


_T111 = ("1.11.0",)
_T21 = ("1.11.0", "2.1.0")
ATEN_RULES: tuple[AffinityRule, ...] = (
    AffinityRule(
        "torch_npu.npu_confusion_transpose",
        (
            "(permute|transpose)-(contiguous){0,1}-(reshape|view)",
            "(reshape|view)-(contiguous){0,1}-(permute|transpose)",
        ),
        "6.3.RC2",
        _T111,
    ),
    AffinityRule("torch_npu.fast_gelu", ("gelu",), "6.3.RC2", _T111),
    AffinityRule(
        "torch_npu.npu_scaled_masked_softmax", ("softmax-(mul){0,1}-(masked_fill_|add)",), "6.3.RC2", _T111
    ),
    AffinityRule("optimizer.clip_grad_norm_fused_", ("add-reciprocal-mul",), "6.3.RC2", _T111),
    AffinityRule(
        "torch_npu.npu_fusion_attention",
        ("matmul-(add){0,1}-(mul){0,1}-(masked_fill_|add){0,1}-softmax-(dropout){0,1}-matmul",),
        "7.0.RC1",
        _T21,
    ),
    AffinityRule("torch_npu.npu_rotary_mul", ("(chunk|slice)-neg-cat-(mul){0,2}-add",), "7.0.RC1", _T21),
    AffinityRule(
        "torch_npu.npu_rms_norm",
        ("(pow){0,1}-(mean){0,1}-(add){0,1}-rsqrt-mul-(type_as){0,1}",),
        "7.0.0",
        _T21,
    ),
    AffinityRule(
        "torch_npu.npu_swiglu",
        (
            "(slice|chunk)-silu-mul",
            "(slice|chunk)-mul-silu",
            "(slice|chunk)-sigmoid-mul-mul",
            "(slice|chunk)-mul-sigmoid-mul",
            "(slice|chunk)-mul-mul-sigmoid",
        ),
        "7.0.0",
        _T21,
    ),
    AffinityRule(
        "torch_npu.npu_geglu", ("(slice|chunk)-gelu-mul", "(slice|chunk)-mul-gelu"), "8.0.RC1", _T21
    ),
    AffinityRule("torch_npu.npu_group_norm_silu", ("group_norm-silu",), "8.0.RC1", _T21),
    AffinityRule("torch.addmm", ("mul-mul-add",), "8.0.RC1", _T21),
    AffinityRule("torch_npu.npu_add_layer_norm", ("add-layer_norm",), "8.0.RC1", _T21),
    AffinityRule("mindspeed.ops.npu_matmul_add", ("matmul-add",), "8.0.RC3", _T21, default=False),
    AffinityRule(
        "mindspeed.ops.npu_moe_token_permute",
        ("argsort-argsort-index_select",),
        "8.0.RC3",
        _T21,
        default=False,
    ),
    AffinityRule(
        "mindspeed.ops.npu_moe_token_unpermute",
        ("index_select-mul-reduce_sum",),
        "8.0.RC3",
        _T21,
        default=False,
    ),
)
# Optimizer.step#<Name>.step -> fused optimizer (CANN 6.3.RC2 / torch 1.11.0 rule set, inherited since).
OPTIMIZER_RULES: dict[str, str] = {
    name: f"torch_npu.optim.NpuFused{name}"
    for name in ("AdamW", "SGD", "Adadelta", "Lamb", "AdamP", "BertAdam", "RMSprop", "RMSpropTF", "Adam")
}
RULESET = "msprof-analyze timeline_fusion_ops.yaml, CANN 8.0.0 / torch 2.1.0 lineage (advisor default)"

_ELEM_RE = re.compile(r"^\((?P<alts>[\w|]+)\)(?P<q>\{\d+(?:,\d*)?\}|[*+?])?$|^(?P<name>\w+)$")
_OPT_RE = re.compile(r"^Optimizer\.step#(?P<name>\w+)\.step$")
_FRAMEWORK_FRAMES = (
    "site-packages/torch/",
    "site-packages/torch_npu/",
    "/torch/nn/",
    "torch_npu/",
    "megatron/",
    "deepspeed/",
)


def rule_elements(rule: str) -> list[tuple[list[str], str]]:
    """`(a|b){0,1}-c` -> [(['a', 'b'], '{0,1}'), (['c'], '')]: each element's op names and quantifier."""
    out = []
    for elem in rule.split("-"):
        m = _ELEM_RE.match(elem.strip())
        if not m:
            raise ValueError(f"bad affinity rule element {elem!r} in {rule!r}")
        out.append((m["alts"].split("|") if m["alts"] else [m["name"]], m["q"] or ""))
    return out


def compile_pattern(rule: str) -> re.Pattern[str]:
    """`(a|b){0,1}-c` -> a regex over 'name;name;...' strings that only matches whole op names."""
    parts = ["(?:" + "|".join(re.escape(a) + ";" for a in alts) + ")" + q for alts, q in rule_elements(rule)]
    return re.compile(r"(?<![^;])" + "".join(parts))


_COMPILED: dict[str, list[re.Pattern[str]]] = {
    r.api: [compile_pattern(p) for p in r.patterns] for r in ATEN_RULES
}


def first_level(ops: pd.DataFrame) -> pd.DataFrame:
    """aten/npu ops not nested inside another aten/npu op of the same (rank, tid).

    `ops` is sorted by (rank, tid, start, longest first). Ops on one thread nest properly, so an op is
    inside an earlier one exactly when it starts before the latest end seen so far on its thread.
    Per thread (rows in their order): the running maximum of the ends, and an op is first-level when it is
    the thread's first or starts at or after the running maximum before it (numpy, one slice per thread).
    """
    if ops.empty:
        return ops
    start = ops["start_ns"].to_numpy(dtype="int64")
    end = start + ops["dur_ns"].to_numpy(dtype="int64")
    order = _thread_order(ops)
    keep = np.ones(order.size, dtype=bool)
    for a, b in _thread_bounds(ops, order):
        idx = order[a:b]
        run = np.maximum.accumulate(end[idx])
        keep[idx[1:]] = start[idx[1:]] >= run[:-1]
    return ops[keep]


def _tokens(names: list[str]) -> tuple[str, list[int]]:
    """The op-name sequence as 'name;name;...' and the offset where each name starts (plus the end)."""
    starts = [0]
    for n in names:
        starts.append(starts[-1] + len(n) + 1)
    return "".join(n + ";" for n in names), starts


def match_sequences(names: list[str], pattern: re.Pattern[str]) -> list[tuple[int, int]]:
    """(first index, length) of each non-overlapping match of `pattern` in the op-name sequence."""
    return _find(*_tokens(names), pattern)


def _find(text: str, starts: list[int], pattern: re.Pattern[str]) -> list[tuple[int, int]]:
    out = []
    for m in pattern.finditer(text):
        if m.end() == m.start():
            continue
        i = bisect.bisect_left(starts, m.start())
        j = bisect.bisect_left(starts, m.end())
        out.append((i, j - i))
    return out


class _TokenMatcher:
    """The rules compiled over op-name sequences written one character per distinct op name.

    Every element of a rule matches whole op names, so writing each name as one character and each element
    as a character class finds the same matches as the 'name;name;...' text (`compile_pattern`), on a text
    as long as the sequence instead of its characters. Not usable when a name contains the ';' separator
    (then the 'name;' text is ambiguous and the text form is used)."""

    def __init__(self, names: set[str]) -> None:
        self.usable = len(names) < 0xFFFE and not any(";" in n for n in names)
        self.code = {n: chr(0xF0000 + i) for i, n in enumerate(sorted(names))} if self.usable else {}
        self.patterns = {(api, text): self._compile(text) for api, texts in _PATTERN_TEXTS.items()
                         for text in texts} if self.usable else {}

    def _compile(self, rule: str) -> re.Pattern[str]:
        parts = []
        for alts, q in rule_elements(rule):
            chars = "".join(self.code[a] for a in alts if a in self.code)
            # an element none of whose names occur can only match zero times: an always-failing group
            parts.append("(?:" + (f"[{chars}]" if chars else "(?!)") + ")" + q)
        return re.compile("".join(parts))

    def text(self, names: list[str]) -> str:
        return "".join(self.code[n] for n in names)

    def find(self, text: str, api: str, rule: str) -> list[tuple[int, int]]:
        """(first index, length) of each non-empty, non-overlapping match, as `_find` gives them."""
        return [(m.start(), m.end() - m.start()) for m in self.patterns[(api, rule)].finditer(text)
                if m.end() != m.start()]


_PATTERN_TEXTS: dict[str, tuple[str, ...]] = {r.api: r.patterns for r in ATEN_RULES}


def user_frame(stack: object) -> str | None:
    """First frame of a ';'-joined call stack outside torch / torch_npu / megatron / deepspeed."""
    if not isinstance(stack, str):
        return None
    frames = [f.strip() for f in stack.split(";") if f.strip()]
    return next(
        (f for f in frames if not any(x in f for x in _FRAMEWORK_FRAMES)), frames[0] if frames else None
    )


def _thread_keys(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, missing tid, tid) per row: a thread is equal keys, so a rank's rows without a tid are one
    thread apart from tid 0."""
    rank = ops["rank"].to_numpy(dtype="int64")
    no_tid = ops["tid"].isna().to_numpy()
    tid = ops["tid"].to_numpy(dtype="int64", na_value=0)
    return rank, no_tid, tid


def _thread_order(ops: pd.DataFrame) -> np.ndarray:
    """Row order grouping `ops` by thread, threads as `groupby(["rank", "tid"], dropna=False, sort=True)`
    orders them (missing tid last in its rank); stable, so each thread keeps its row order."""
    rank, no_tid, tid = _thread_keys(ops)
    return np.lexsort((tid, no_tid, rank))


def _thread_bounds(ops: pd.DataFrame, order: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each thread in `order`."""
    if order.size == 0:
        return []
    r, n, t = (k[order] for k in _thread_keys(ops))
    new = np.ones(order.size, dtype=bool)
    new[1:] = (r[1:] != r[:-1]) | (n[1:] != n[:-1]) | (t[1:] != t[:-1])
    cuts = np.flatnonzero(new)
    return list(zip(cuts.tolist(), np.append(cuts[1:], order.size).tolist(), strict=True))




def optimizer_hits(ops: pd.DataFrame) -> list[dict]:
    """One hit per `Optimizer.step#<Name>.step` host op whose <Name> has a fused optimizer (OPTIMIZER_RULES).

    A hit is a dict: api, pattern, rank, step, sequence, host_ns (the op's duration, ns), stack, since (CANN),
    torch (versions)."""
    hits: list[dict] = []
    for r in ops.itertuples(index=False):
        m = _OPT_RE.match(str(r.name))
        if m and m["name"] in OPTIMIZER_RULES:
            hits.append(
                {
                    "api": OPTIMIZER_RULES[m["name"]],
                    "pattern": f"Optimizer.step#{m['name']}.step",
                    "rank": int(r.rank),
                    "step": r.step,
                    "sequence": str(r.name),
                    "host_ns": float(r.dur_ns),
                    "stack": r.call_stack,
                    "since": "6.3.RC2",
                    "torch": _T111,
                }
            )
    return hits


def aten_hits(ops: pd.DataFrame) -> list[dict]:
    """One hit (as `optimizer_hits`) per match of a default ATEN_RULES pattern in a thread's first-level ops.

    `ops`: aten/npu host ops sorted by (rank, tid, start, longest first). Threads in `_thread_order`, rules in
    table order, matches in start order; a match's step and stack are its first op's, its host_ns the sum of
    its ops' durations."""
    aten = first_level(ops)
    short = {n: str(n).removeprefix("aten::") for n in pd.unique(aten["name"].to_numpy(dtype=object))}
    matcher = _TokenMatcher(set(short.values()))
    # one pass over all ranks' rows instead of a pandas group per thread: on many-rank profiles the
    # per-group pandas overhead, not the matching, was the cost
    order = _thread_order(aten)
    names_all = [short[n] for n in aten["name"].to_numpy(dtype=object)[order]]
    rank_all = aten["rank"].to_numpy(dtype="int64")[order]
    step_all = aten["step"].to_numpy(dtype=object)[order]
    stack_all = aten["call_stack"].to_numpy(dtype=object)[order]
    dur_all = aten["dur_ns"].to_numpy(dtype="float64")[order]
    hits: list[dict] = []
    for a, b in _thread_bounds(aten, order):
        names = names_all[a:b]
        if matcher.usable:
            ctext = matcher.text(names)
        else:
            text, starts = _tokens(names)
        rank = int(rank_all[a])
        step = step_all[a:b]
        stack = stack_all[a:b]
        # per thread, so a match's host time is a difference of its own thread's running sums
        dur = np.concatenate([[0.0], np.cumsum(dur_all[a:b])])
        for rule in ATEN_RULES:
            if not rule.default:
                continue
            for pat_text, pat in zip(rule.patterns, _COMPILED[rule.api], strict=True):
                found = (matcher.find(ctext, rule.api, pat_text) if matcher.usable
                         else _find(text, starts, pat))
                for i, n in found:
                    hits.append(
                        {
                            "api": rule.api,
                            "pattern": pat_text,
                            "rank": rank,
                            "step": step[i],
                            "sequence": "-".join(names[i : i + n]),
                            "host_ns": float(dur[i + n] - dur[i]),
                            "stack": stack[i],
                            "since": rule.since_cann,
                            "torch": rule.torch,
                        }
                    )
    return hits
