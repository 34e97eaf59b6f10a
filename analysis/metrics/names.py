"""Readable names for device ops: C++ kernel signatures are kilobytes long.

short_name drops the return type (`void `), template arguments (`<...>`, nested) and the parameter list
(`(...)`), and namespaces beyond the last two components, e.g.
`void fbgemm_gpu::split_embedding_codegen_forward_kernel<c10::Half, ...>(at::Generic...)`
-> `fbgemm_gpu::split_embedding_codegen_forward_kernel`. Names without such syntax are returned as is.
"""

from __future__ import annotations

import re

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


def short_name(name: str, max_len: int = 80) -> str:
    # only C++ signatures carry templates / parameter lists; "Memcpy DtoD (Device -> Device)" keeps its parens
    if "<" not in name and "::" not in name and not _VOID.match(name):
        return name if len(name) <= max_len else name[: max_len - 1] + "…"
    s = _VOID.sub("", name.strip())
    s = _strip_brackets(_strip_brackets(s, "<", ">"), "(", ")").strip()
    parts = s.split("::")
    s = "::".join(parts[-2:]) if len(parts) > 2 else s
    s = s or name
    return s if len(s) <= max_len else s[: max_len - 1] + "…"
