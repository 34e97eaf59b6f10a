"""Readable names for device ops: C++ kernel signatures are kilobytes long.

short_name drops the return type (`void `), template arguments (`<...>`, nested) and the parameter list
(`(...)`), and namespaces beyond the last two components, e.g.
`void fbgemm_gpu::split_embedding_codegen_forward_kernel<c10::Half, ...>(at::Generic...)`
-> `fbgemm_gpu::split_embedding_codegen_forward_kernel`. Names without such syntax are returned as is.
That is for prose (findings, verdicts). Tables show `display_name`: the template arguments stay (they
tell two instantiations of a kernel apart), what is too long is cut in the middle, and `display_names`
makes the names of one column show differently where they differ.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_VOID = re.compile(r"^(void|auto|static)\s+")


def _strip_brackets(s: str, open_c: str, close_c: str) -> str:
    out, depth = [], 0
    for ch in s:
        if ch == open_c:
            depth += 1
        elif ch == close_c and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _is_signature(name: str) -> bool:
    """Only C++ signatures carry templates / parameter lists: "Memcpy DtoD (Device -> Device)" keeps its
    parentheses."""
    return "<" in name or "::" in name or bool(_VOID.match(name))


def short_name(name: str, max_len: int = 80) -> str:
    if not _is_signature(name):
        return name if len(name) <= max_len else name[: max_len - 1] + "…"
    s = _VOID.sub("", name.strip())
    s = _strip_brackets(_strip_brackets(s, "<", ">"), "(", ")").strip()
    parts = s.split("::")
    s = "::".join(parts[-2:]) if len(parts) > 2 else s
    s = s or name
    return s if len(s) <= max_len else s[: max_len - 1] + "…"


def display_name(name: str, width: int) -> str:
    """A kernel or op name in at most `width` characters. A C++ signature loses its return type
    ("void ") and parameter list, and its template arguments their spaces ("kernel<float, 5ul>(at::...)"
    -> "kernel<float,5ul>"); what is still too long keeps its start and its end around an ellipsis, so
    that template arguments which tell two instantiations apart stay visible."""
    s = name.strip()
    if len(s) <= width:
        return s
    s = _signature_name(s)
    if len(s) <= width:
        return s
    if width <= 1:
        return "…"[:width]
    tail = (width - 1) * 2 // 5
    return s[:width - 1 - tail] + "…" + (s[-tail:] if tail else "")


def _signature_name(s: str) -> str:
    """A C++ signature without return type, anonymous namespaces, parameter list and the spaces of its
    template arguments; any other name as it is."""
    if not _is_signature(s):
        return s
    s = _VOID.sub("", s).replace("(anonymous namespace)::", "")
    depth = 0
    for i, c in enumerate(s):  # cut the parameter list: the first '(' outside template arguments / lambdas
        if c in "<{":
            depth += 1
        elif c in ">}":
            depth = max(depth - 1, 0)
        elif c == "(" and depth == 0 and i > 0:
            s = s[:i]
            break
    return re.sub(r",\s+", ",", s)


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def display_names(names: Sequence[str], width: int) -> list[str]:
    """`display_name` of each name; where two different names would show the same, each instead shows its
    start, an ellipsis, and the text from where it parts from the most similar of them (cut at `width`),
    e.g. "split_…nel_cta_per_row_1<floa…" beside "split_…nel_warp_per_row_1<flo…"."""
    shown = [display_name(n, width) for n in names]
    sigs = [_signature_name(n.strip()) for n in names]
    same: dict[str, set[str]] = {}
    for d, s in zip(shown, sigs, strict=True):
        same.setdefault(d, set()).add(s)
    for k, s in enumerate(sigs):
        others = same[shown[k]] - {s}
        if not others or len(shown[k]) >= len(s):
            continue
        part = max(_common_prefix(s, o) for o in others)
        head = min(max(4, width // 5), part)
        alt = s[:head] + "…" + s[max(part - 3, head):]
        shown[k] = alt if len(alt) <= width else alt[:max(width - 1, 0)] + "…"
    return shown


# Python-level names carry the object's address ("<built-in method to of Tensor object at 0x7f72809f2990>"),
# which differs in every process: without it the same call matches across runs.
_ADDRESS = re.compile(r"\s+at 0x[0-9a-fA-F]+")


def strip_address(name: str) -> str:
    """A host op / Python function name without ` at 0x...` object addresses."""
    return _ADDRESS.sub("", name)


# The one kernel-name table: (pattern on the full signature, label builder). First match wins. GEMM
# libraries encode the element type in the name (f32f32 / bf16 / tf32); it is what a reader acts on.
_DTYPES = (("tf32", "tf32"), ("bf16", "bf16"), ("bfloat16", "bf16"), ("f16", "fp16"), ("half", "fp16"),
           ("f32", "fp32"), ("float", "fp32"))


def _dtype(name: str) -> str:
    low = name.lower()
    return next((label for key, label in _DTYPES if key in low), "")


def _gemm(name: str) -> str:
    low = name.lower()
    lib = "cutlass" if "cutlass" in low else "cublas" if ("xmma" in low or "cublas" in low or "gemm" in low) else ""
    extra = " ".join(x for x in (lib, _dtype(name)) if x)
    return f"gemm ({extra})" if extra else "gemm"


_KERNEL_TABLE: tuple[tuple[re.Pattern[str], object], ...] = (
    (re.compile(r"fmha|flash_?(fwd|bwd|attn)|cudnn.*(attention|sdpa)|fused_attention", re.I),
     lambda n: f"attention kernel ({_dtype(n)})" if _dtype(n) else "attention kernel"),
    (re.compile(r"gemm|xmma|cutlass::Kernel|cublas|wgrad|dgrad", re.I), _gemm),
    (re.compile(r"nccl|rccl", re.I), lambda n: "nccl " + re.sub(r"^nccl(Dev)?Kernel_?", "", short_name(n, 40))),
)


def kernel_label(name: str) -> str:
    """A kernel name a person reads: GEMM / attention kernels by library and dtype (`gemm (cutlass bf16)`),
    PyTorch's templated elementwise / reduce kernels by their last name without `_kernel` and without
    namespaces, templates and arguments (`void at::native::vectorized_elementwise_kernel<4, ...>(...)` ->
    `vectorized_elementwise`); other names as `short_name` gives them, last component only."""
    for rx, build in _KERNEL_TABLE:
        if rx.search(name):
            return build(name)  # type: ignore[operator]
    s = short_name(name, 400).split("::")[-1]
    s = re.sub(r"_kernel(_cuda|_impl)?$|^kernel_", "", s) or s
    return s if len(s) <= 60 else s[:59] + "…"


def operator_label(name: str) -> str:
    """An operator name for prose: autograd's `autograd::engine::evaluate_function: BmmBackward0` ->
    `BmmBackward0`; addresses removed."""
    s = strip_address(name)
    return s.split("evaluate_function: ", 1)[1] if "evaluate_function: " in s else s


# Host calls that launch device work (HTA get_cuda_kernel_launch_stats / queue length list, Ascend Node@launch).
LAUNCH_RE = re.compile(
    r"^(cudaLaunchKernel(ExC)?(_v\d+)?|cuLaunchKernel(Ex)?|cudaLaunchCooperativeKernel|cudaGraphLaunch|"
    r"cudaMemcpyAsync|cudaMemsetAsync|cudaMemcpy2DAsync|hipLaunchKernel|hipExtLaunchKernel|"
    r"hipExtModuleLaunchKernel|hipModuleLaunchKernel|hipGraphLaunch|hipMemcpyAsync|hipMemsetAsync|"
    r"hipMemcpyWithStream|Node@launch|AscendCL@aclopExecute\w*|AscendCL@aclnn\w+)$")

# Host calls that block until device work finishes.
SYNC_RE = re.compile(
    r"^(cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|cudaThreadSynchronize|"
    r"cuStreamSynchronize|cuCtxSynchronize|cuEventSynchronize|hipStreamSynchronize|hipDeviceSynchronize|"
    r"hipEventSynchronize|AscendCL@aclrtSynchronizeStream(WithTimeout)?|AscendCL@aclrtSynchronizeDevice"
    r"(WithTimeout)?|AscendCL@aclrtSynchronizeEvent)$")

# Host calls after which the device has drained: the synchronize calls and the blocking (not *Async) copies.
DRAINED_RE = re.compile(f"{SYNC_RE.pattern}|^(cudaMemcpy|hipMemcpy)$")
