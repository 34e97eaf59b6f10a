"""The knowledge base of fixes: every YAML file validates, every check is answered on every vendor where it
can fire, the fixes the design names exist with the right content, lookups order fixes correctly, and the
generated docs page is fresh."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from stepdoctor.knowledge.edit.kinds import EDIT_KINDS
from stepdoctor.knowledge.edit.kinds.base import render_template
from stepdoctor.knowledge.loader import fixes_dir, fixes_for, get_fix, load_fixes, subject_matches
from stepdoctor.knowledge.render import render_fix_markdown, render_fixes_doc
from stepdoctor.knowledge.schema import Fix, check_catalog, count_sentences

REPO = Path(__file__).resolve().parents[1]
FIXES = load_fixes()
CHECKS = check_catalog()
KB_VENDORS = ("ascend", "cuda", "rocm")   # the vendors a fix can name (schema.Vendor)
# fixes whose checks cannot run on the fix's vendors yet (fix, check): reason
UNREACHABLE: dict[tuple[str, str], str] = {}


def _raw(fix_id: str) -> dict:
    return yaml.safe_load(fixes_dir().joinpath(f"{fix_id}.yaml").read_text(encoding="utf-8"))


# ---- loading


def test_loads_at_least_thirty_fixes_with_ids_equal_to_file_stems():
    files = sorted(e.name for e in fixes_dir().iterdir() if e.name.endswith(".yaml"))
    assert len(FIXES) >= 30
    assert len(files) == len(FIXES)
    assert [f.removesuffix(".yaml") for f in files] == sorted(FIXES)
    for fix_id, fix in FIXES.items():
        assert fix.id == fix_id
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", fix_id)


def test_every_check_class_carries_what_the_knowledge_base_needs():
    assert CHECKS, "no check registered"
    for cid, cls in CHECKS.items():
        assert cls.fires_when and cls.title, cid
        assert set(cls.frameworks) <= {"pytorch", "mindspore"}, cid
        assert set(cls.vendors) & set(KB_VENDORS), cid


def test_contract_catalog_lists_every_check_with_its_class_text():
    contract = REPO / "docs" / "contract.md"
    text = contract.read_text(encoding="utf-8").split("## Check catalog", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([a-z0-9-]+)` \| (.+?) \|$", text, flags=re.M))
    assert set(rows) == set(CHECKS)
    for check, description in rows.items():
        assert CHECKS[check].fires_when == description.strip().replace("\\|", "|"), check


@pytest.mark.parametrize(
    ("check", "vendor"), [(c, v) for c, cls in CHECKS.items() for v in cls.vendors if v in KB_VENDORS]
)
def test_every_check_has_a_fix_on_every_vendor_where_it_can_fire(check, vendor):
    ids = fixes_for(check, vendor)
    assert ids, f"no fix answers {check} on {vendor}"
    for fix_id in ids:
        applies = FIXES[fix_id].applies_to
        assert "any" in applies.vendor or vendor in applies.vendor


@pytest.mark.parametrize(
    ("check", "framework"), [(c, f) for c, cls in CHECKS.items() for f in cls.frameworks]
)
def test_ascend_checks_have_fixes_for_both_frameworks(check, framework):
    assert fixes_for(check, "ascend", framework), f"no {framework} fix for {check} on ascend"


def test_every_fix_answers_a_check_on_a_vendor_where_it_runs():
    # A fix whose checks never run on the fix's vendors is never offered by a finding.
    def runs(fix: Fix, check: str) -> bool:
        vendors = set(fix.applies_to.vendor)
        return "any" in vendors or bool(vendors & set(CHECKS[check].vendors))

    unreachable = {f.id for f in FIXES.values() if not any(runs(f, c) for c in f.checks)}
    assert unreachable == {f for f, _ in UNREACHABLE}
    for fix_id, check in UNREACHABLE:
        assert check in FIXES[fix_id].checks


def test_fix_content_is_complete():
    for fix in FIXES.values():
        assert 2 <= count_sentences(fix.why) <= 5, fix.id
        assert fix.steps and fix.risks and fix.references and fix.verify
        assert fix.code_edit, f"{fix.id} has no before/after"
        for edit in fix.code_edit:
            assert edit.kind in EDIT_KINDS
            assert edit.before.strip() and edit.after.strip()
            sample = {name: [1] for name in edit.requires_params} | dict(edit.params)
            for source in edit.expressions().values():
                compile(render_template(source, sample), "<kwarg>", "eval")
        for ref in fix.references:
            assert ref.url is None or ref.url.startswith("https://")
        if any(e.kind == "env" for e in fix.code_edit):
            assert fix.env


# ---- the content the design asks for


def _env(fix_id: str) -> dict[str, str | None]:
    return {v.name: v.value for v in FIXES[fix_id].env}


def test_required_environment_variable_fixes():
    assert _env("aclnn-cache-limit") == {"ACLNN_CACHE_LIMIT": "100000"}
    assert FIXES["aclnn-cache-limit"].env[0].at_least == 10000
    assert _env("ascend-launch-blocking-off")["ASCEND_LAUNCH_BLOCKING"] is None
    assert _env("cuda-launch-blocking-off")["CUDA_LAUNCH_BLOCKING"] is None
    assert _env("ascend-log-level-error")["ASCEND_GLOBAL_LOG_LEVEL"] == "3"
    assert _env("host-cache-capacity") == {"HOST_CACHE_CAPACITY": "20"}
    assert _env("npu-alloc-expandable-segments") == {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
    assert _env("cuda-alloc-expandable-segments") == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert _env("hccl-algo-unset") == {"HCCL_ALGO": None}
    assert set(_env("hccl-rdma-tc-sl-review")) == {"HCCL_RDMA_TC", "HCCL_RDMA_SL"}
    assert _env("npu-task-queue-cpu-affinity") == {"TASK_QUEUE_ENABLE": "2", "CPU_AFFINITY_CONF": "1"}


def test_required_code_fixes_carry_the_real_api_calls():
    def text(fix_id: str) -> str:
        fix = FIXES[fix_id]
        return " ".join(
            [
                fix.why,
                *fix.steps,
                *(e.after for e in fix.code_edit),
                *(s for e in fix.code_edit for s in e.statement_templates()),
            ]
        )

    assert "gc.freeze()" in text("gc-freeze-before-training") and "gc.collect()" in text(
        "gc-freeze-before-training"
    )
    assert "gc.disable()" in text("gc-disable-collect-periodically")
    assert "gc.set_threshold" in text("gc-disable-collect-periodically")
    assert "num_parallel_workers=" in text("mindspore-map-parallel-workers")
    dl = {k.name for k in FIXES["dataloader-workers-pin-memory"].code_edit[0].kwargs}
    assert dl == {"num_workers", "pin_memory", "persistent_workers", "prefetch_factor"}
    assert "all_reduce_fusion_config=[85, 160]" in text("allreduce-fusion-split")
    assert {k.name for k in FIXES["ddp-bucket-overlap"].code_edit[0].kwargs} == {
        "bucket_cap_mb",
        "gradient_as_bucket_view",
    }
    assert "set_compile_mode(jit_compile=False)" in text("npu-jit-compile-off")
    assert "allow_internal_format = False" in text("npu-jit-compile-off")
    assert "convert_sync_batchnorm" in " ".join(FIXES["remove-sync-batchnorm"].code_edit[0].locate.calls)
    assert "np.float32" in text("aicpu-double-to-float")
    assert "masked_fill" in text("aicpu-op-replacement")
    assert "IndexPut" in FIXES["aicpu-op-replacement"].subjects
    assert "torch_npu.optim.NpuFusedAdamW" in text("npu-fused-optimizer")
    assert "clip_grad_norm_fused_" in text("npu-fused-optimizer")
    assert "fused=True" in text("torch-fused-optimizer")
    assert 'amp_level="O2"' in text("mindspore-amp-o2") and "to_float(mstype.float16)" in text(
        "mindspore-amp-o2"
    )
    assert "torch.autocast" in text("torch-autocast-bf16") and "bfloat16" in text("torch-autocast-bf16")
    assert "no_sync()" in text("gradient-accumulation")
    assert '"stage": 2' in text("zero-stage-lower")
    assert "torch.cuda.empty_cache" in FIXES["remove-empty-cache-in-loop"].code_edit[0].locate.calls
    assert "torch.npu.empty_cache" in FIXES["remove-empty-cache-in-loop"].code_edit[0].locate.calls
    assert "non_blocking=True" in text("pinned-memory-non-blocking")
    assert 'mode="reduce-overhead"' in text("cuda-graphs-compile")
    assert "aoe --job_type=2" in text("aoe-operator-tuning")
    assert "256" in text("align-matmul-attention-shapes") and "128" in text("align-matmul-attention-shapes")


def test_expected_gains_quote_the_mindspore_guide():
    assert "90 ms" in FIXES["mindspore-map-parallel-workers"].expected_gain.text
    assert "18.07 ms" in FIXES["mindspore-map-parallel-workers"].expected_gain.text
    assert "6.15 ms" in FIXES["allreduce-fusion-split"].expected_gain.text
    assert "4.20 ms" in FIXES["allreduce-fusion-split"].expected_gain.text
    assert "82.45 ms" in FIXES["mindspore-amp-o2"].expected_gain.text
    assert "16.89 ms" in FIXES["mindspore-amp-o2"].expected_gain.text
    for fix_id in ("mindspore-map-parallel-workers", "allreduce-fusion-split", "mindspore-amp-o2"):
        assert "MindInsight performance optimization guide" in (FIXES[fix_id].expected_gain.source or "")


@pytest.mark.parametrize(
    ("fix_id", "tools"),
    [
        ("npu-freq-throttle-triage", ["npu-smi"]),
        ("rdma-retransmission-triage", ["hccn_tool", "HCCL_RDMA_TIMEOUT"]),
        ("slow-rank-hardware-triage", ["npu-smi", "nvidia-smi", "hccn_tool", "ibstat"]),
    ],
)
def test_hardware_fixes_say_whom_to_contact_and_what_evidence_to_bring(fix_id, tools):
    fix = FIXES[fix_id]
    steps = " ".join(fix.steps)
    assert re.search(r"[Cc]ontact", steps)
    assert "evidence" in steps.lower() or "with:" in steps
    for tool in tools:
        assert tool in steps + " ".join(e.after for e in fix.code_edit) + fix.why


# ---- lookups


ADVISOR_APIS = {
    "torch_npu.npu_rms_norm": "npu-rms-norm",
    "torch_npu.npu_fusion_attention": "npu-fusion-attention",
    "torch_npu.npu_rotary_mul": "npu-rotary-mul",
    "torch_npu.npu_swiglu": "npu-swiglu-geglu",
    "torch_npu.npu_geglu": "npu-swiglu-geglu",
    "torch_npu.fast_gelu": "npu-fast-gelu",
    "torch_npu.npu_confusion_transpose": "npu-confusion-transpose",
    "torch_npu.npu_scaled_masked_softmax": "npu-scaled-masked-softmax",
    "torch_npu.npu_add_layer_norm": "npu-add-layer-norm",
    "torch_npu.npu_group_norm_silu": "npu-group-norm-silu",
    "torch.addmm": "torch-addmm",
    "mindspeed.ops.npu_matmul_add": "mindspeed-fused-ops",
    "mindspeed.ops.npu_moe_token_permute": "mindspeed-fused-ops",
    "optimizer.clip_grad_norm_fused_": "npu-fused-optimizer",
    "torch_npu.optim.NpuFusedAdamW": "npu-fused-optimizer",
    "NpuFusedSGD": "npu-fused-optimizer",
}


@pytest.mark.parametrize(("api", "fix_id"), sorted(ADVISOR_APIS.items()))
def test_affinity_api_findings_find_their_fix_by_subject(api, fix_id):
    assert fixes_for("affinity-api", "ascend", "pytorch", subject=api)[0] == fix_id
    assert fixes_for("affinity-api", "ascend", "pytorch", subject=api) == [fix_id]


def test_affinity_api_subjects_do_not_cross_match():
    assert not subject_matches(FIXES["npu-rms-norm"], "torch_npu.npu_add_rms_norm")
    assert subject_matches(FIXES["npu-fast-gelu"], "fast_gelu")
    assert subject_matches(FIXES["sdpa-fused-attention"], "torch.nn.functional.scaled_dot_product_attention")
    # the same subject, two fixes: the finding's evidence says which (`when`: the math backend or hand-written)
    sdpa = "F.scaled_dot_product_attention"
    assert fixes_for("affinity-api", "cuda", "pytorch", subject=sdpa) == ["sdpa-fused-attention", "sdpa-fused-backend"]
    for attention, fix in (("hand_written", "sdpa-fused-attention"), ("math_backend", "sdpa-fused-backend")):
        assert fixes_for("affinity-api", "cuda", "pytorch", subject=sdpa, evidence={"attention": attention}) == [fix]
    assert fixes_for("affinity-api", "ascend", "pytorch", subject="torch_npu.npu_unknown_op") == []


def test_env_var_findings_put_the_fix_naming_the_variable_first():
    for fix in FIXES.values():
        if "env-var" not in fix.checks:
            continue
        for var in fix.env:
            vendor = "ascend" if "ascend" in fix.applies_to.vendor else fix.applies_to.vendor[0]
            ids = fixes_for("env-var", vendor, None, subject=var.name)
            assert ids and ids[0] == fix.id, (var.name, ids)
            assert all(var.name in {v.name for v in FIXES[i].env} for i in ids)


def test_ordering_prefers_vendor_and_framework_specific_fixes():
    assert fixes_for("sync-stream", "ascend")[0] == "ascend-launch-blocking-off"
    assert fixes_for("sync-stream", "cuda")[0] == "cuda-launch-blocking-off"
    assert fixes_for("slow-dataloader", "ascend", "mindspore")[0] == "mindspore-map-parallel-workers"
    assert fixes_for("slow-dataloader", "cuda", "pytorch")[0] == "dataloader-workers-pin-memory"
    assert fixes_for("exposed-comm-tail", "ascend", "mindspore")[0] == "allreduce-fusion-split"
    assert fixes_for("exposed-comm-tail", "cuda", "pytorch")[0] == "ddp-bucket-overlap"
    assert fixes_for("fp32-compute", "ascend", "mindspore")[0] == "mindspore-amp-o2"
    assert set(fixes_for("memory-ops", "cuda", "pytorch")[:2]) == {
        "remove-empty-cache-in-loop",
        "cuda-alloc-expandable-segments",
    }
    assert fixes_for("memory-ops", "cuda", "pytorch")[-1] == "reduce-device-memory-pressure"
    # MindSpore-only fixes never show up for PyTorch and the reverse.
    assert "mindspore-map-parallel-workers" not in fixes_for("slow-dataloader", "ascend", "pytorch")
    assert "dataloader-workers-pin-memory" not in fixes_for("slow-dataloader", "ascend", "mindspore")
    assert fixes_for("slow-rank", "ascend", subject="compute")[0] in {
        "npu-freq-throttle-triage",
        "slow-rank-hardware-triage",
    }


def test_unknown_ids_raise_helpful_errors():
    with pytest.raises(KeyError, match="gc-freeze-before-training"):
        get_fix("gc-freeze")
    with pytest.raises(KeyError, match="aclnn-cache-limit"):
        get_fix("aclnn-cache-limt")
    with pytest.raises(KeyError, match="known: "):
        fixes_for("no-such-check")


def test_load_fixes_returns_a_copy_of_the_cache():
    fixes = load_fixes()
    fixes.pop("aclnn-cache-limit")
    assert "aclnn-cache-limit" in load_fixes()


# ---- schema rejects bad entries


def _validate(data: dict, stem: str) -> Fix:
    return Fix.model_validate(data, context={"file_stem": stem})


def test_schema_rejects_mistakes():
    good = _raw("aclnn-cache-limit")
    assert _validate(good, "aclnn-cache-limit").id == "aclnn-cache-limit"
    cases = {
        "id differs from the file stem": (good, "other-name"),
        "extra field": ({**good, "severity": "high"}, "aclnn-cache-limit"),
        "unknown check": ({**good, "checks": ["env-var", "slow-disk"]}, "aclnn-cache-limit"),
        "one-sentence why": ({**good, "why": "It is faster."}, "aclnn-cache-limit"),
        "verify without a command": ({**good, "verify": ["look at it"]}, "aclnn-cache-limit"),
        "verify with an unknown check": (
            {**good, "verify": ["issues PATH --check nope"]},
            "aclnn-cache-limit",
        ),
        "bad vendor": (
            {**good, "applies_to": {"vendor": ["tpu"], "framework": ["any"]}},
            "aclnn-cache-limit",
        ),
        "http reference": (
            {**good, "references": [{"title": "x doc", "url": "http://x"}]},
            "aclnn-cache-limit",
        ),
    }
    for name, (data, stem) in cases.items():
        with pytest.raises(ValidationError):
            _validate(data, stem)
        assert name  # keeps the case name visible in a failing traceback

    bad_id = copy.deepcopy(good)
    bad_id["id"] = "ACLNN_cache"
    with pytest.raises(ValidationError, match="kebab-case"):
        _validate(bad_id, "ACLNN_cache")

    edit = copy.deepcopy(_raw("dataloader-workers-pin-memory"))
    edit["code_edit"][0]["kwargs"][0]["value"] = "${undefined_param}"
    with pytest.raises(ValidationError, match="placeholders"):
        _validate(edit, "dataloader-workers-pin-memory")
    edit = copy.deepcopy(_raw("gc-freeze-before-training"))
    edit["code_edit"][0]["statements"] = ["gc.freeze("]
    with pytest.raises(ValidationError, match="does not parse"):
        _validate(edit, "gc-freeze-before-training")
    edit = copy.deepcopy(_raw("npu-fast-gelu"))
    edit["subjects"] = []
    with pytest.raises(ValidationError, match="replacement API"):
        _validate(edit, "npu-fast-gelu")


def test_sentence_counter_ignores_abbreviations():
    assert count_sentences("One thing, e.g. this one. Another thing.") == 2
    assert count_sentences("step 90 ms -> 18.07 ms. torch.compile helps. x") == 3


def test_template_params_render_as_literals():
    assert render_template("f(${x})", {"x": "os.system('rm')"}) == "f(\"os.system('rm')\")"
    assert render_template("[${a}]", {"a": [85, 160]}) == "[[85, 160]]"


# ---- rendering


def test_render_fix_markdown_has_every_section():
    text = render_fix_markdown(FIXES["mindspore-map-parallel-workers"])
    for part in (
        "### `mindspore-map-parallel-workers`",
        "**Why.**",
        "**Steps.**",
        "**Code change**",
        "Before:",
        "After:",
        "num_parallel_workers=8",
        "**Expected gain.**",
        "18.07 ms",
        "**Verify.**",
        "`stepdoctor issues PATH --check slow-dataloader`",
        "**Risks.**",
        "**References.**",
        "(https://www.mindspore.cn/mindinsight/docs/en/master/performance_optimization.html)",
    ):
        assert part in text
    env_text = render_fix_markdown(FIXES["hccl-algo-unset"])
    assert "| `HCCL_ALGO` | unset |" in env_text


def test_render_fixes_doc_indexes_every_check_and_fix():
    doc = render_fixes_doc(FIXES.values())
    for check in CHECKS:
        assert f'<a id="check-{check}"></a>`{check}`' in doc
    for fix_id in FIXES:
        assert f'<a id="{fix_id}"></a>' in doc and f"### `{fix_id}`" in doc
    assert doc.endswith("\n") and not doc.endswith("\n\n")


def test_docs_page_is_fresh():
    page = REPO / "docs" / "fixes.md"
    assert page.exists(), "run: python -m stepdoctor.knowledge.render > docs/fixes.md"
    generated = subprocess.run(
        [sys.executable, "-m", "stepdoctor.knowledge.render"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout
    assert generated == render_fixes_doc(load_fixes().values())
    assert page.read_text(encoding="utf-8") == generated, (
        "docs/fixes.md is stale: run `python -m stepdoctor.knowledge.render > docs/fixes.md`"
    )


def test_a_fix_applies_only_where_the_job_can_use_it():
    """An NCCL setting is no advice for a single-GPU or gloo run; an env-only fix whose variables every rank
    already has as it wants them is no advice either; a variable the profile does not record may be set."""
    from stepdoctor.knowledge.loader import JobFacts, applies_here, load_fixes

    fixes = load_fixes()
    nccl, algo = fixes["torch-nccl-blocking-wait-off"], fixes["hccl-algo-unset"]
    assert not applies_here(nccl, JobFacts(backends=frozenset()))            # one process
    assert not applies_here(nccl, JobFacts(backends=frozenset({"gloo"})))
    assert applies_here(nccl, JobFacts(backends=frozenset({"nccl"})))
    assert applies_here(nccl, JobFacts(backends=None))                       # not known: kept
    assert not applies_here(algo, JobFacts(env={"HCCL_ALGO": frozenset({None})}))
    assert applies_here(algo, JobFacts(env={"HCCL_ALGO": frozenset({None, "level0:NA;level1:ring"})}))
    assert applies_here(algo, JobFacts(env={"HCCL_RDMA_TC": frozenset({None})}))   # HCCL_ALGO not recorded


def test_single_gpu_and_gloo_runs_get_no_nccl_fix():
    from conftest import SHARED, need
    from stepdoctor.tools import api

    for run in ("sync_heavy", "gloo2_straggler", "host_bound"):
        rep = api.issues(need(SHARED / "real" / "gpu-h100" / run))
        assert not [x for f in rep.findings for x in f.fixes if "nccl" in x], run
