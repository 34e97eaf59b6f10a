"""The code editor behind `stepdoctor suggest-edit`: on a corpus of realistic training scripts
(tests/data/scripts), every proposed diff applies with `git apply`, the patched Python parses, the expected
change is there and nothing else moved, a second run changes nothing, and `apply_edit` writes the file with a
backup."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

from stepdoctor.knowledge.edit import (
    EditConflictError,
    EditResult,
    apply_edit,
    suggest_edit,
    suggest_edits_for_fixes,
)

SCRIPTS = Path(__file__).parent / "data" / "scripts"
HAS_GIT = shutil.which("git") is not None
HAS_BASH = shutil.which("bash") is not None


def _copy(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copyfile(SCRIPTS / name, target)
    return target


def _suggest(path: Path, fix_id: str, params: dict | None = None) -> EditResult:
    return suggest_edit(path, fix_id, params=params, root=path.parent)


def _git_apply(workdir: Path, diff: str) -> None:
    """`git apply --check` and then `git apply` the diff inside `workdir` (a fresh repository)."""
    if not (workdir / ".git").exists():
        subprocess.run(["git", "init", "-q"], cwd=workdir, check=True)
    patch = workdir.parent / f"{workdir.name}.patch"
    patch.write_text(diff, encoding="utf-8", newline="")
    for args in (["--check"], []):
        done = subprocess.run(
            ["git", "apply", *args, str(patch)], cwd=workdir, capture_output=True, text=True
        )
        assert done.returncode == 0, f"git apply {' '.join(args)} failed:\n{done.stderr}\n{diff}"


def _changed_lines(diff: str) -> tuple[list[str], list[str]]:
    lines = [line for line in diff.splitlines() if not line.startswith(("---", "+++"))]
    return (
        [line[1:] for line in lines if line.startswith("-")],
        [line[1:] for line in lines if line.startswith("+")],
    )


def _check_applies(tmp_path: Path, name: str, result: EditResult) -> str:
    """The diff applies to a pristine copy and yields exactly `patched_text`; Python still parses, shell
    still passes `bash -n`. Returns the patched text."""
    assert result.changed and result.status == "changed", result.message
    assert result.diff.startswith(f"--- a/{name}\n+++ b/{name}\n")
    assert result.patched_text is not None
    if HAS_GIT:
        work = tmp_path / "git"
        work.mkdir(exist_ok=True)
        shutil.copyfile(SCRIPTS / name, work / name)
        _git_apply(work, result.diff)
        assert (work / name).read_bytes().decode("utf-8") == result.patched_text
    if name.endswith(".py"):
        ast.parse(result.patched_text)
    elif HAS_BASH:
        check = tmp_path / "syntax.sh"
        check.write_text(result.patched_text, encoding="utf-8")
        assert subprocess.run(["bash", "-n", str(check)], capture_output=True).returncode == 0
    return result.patched_text


# (script, fix, params, text that must appear, text that must disappear, number of removed / added lines)
CASES = [
    (
        "gpu_ddp_train.py",
        "dataloader-workers-pin-memory",
        None,
        [
            "        num_workers=4,\n        pin_memory=True,\n"
            "        persistent_workers=True,\n        prefetch_factor=4,\n    )",
            # the val loader already has workers: it gets pinned memory, not the worker tuning extras
            "val_loader = DataLoader(train_set, batch_size=args.batch_size, num_workers=2, pin_memory=True)\n",
        ],
        ["num_workers=0"],
        (2, 5),
    ),
    (
        "gpu_ddp_train.py",
        "gc-freeze-before-training",
        None,
        [
            "import argparse\nimport gc\nimport os\n",
            "    gc.collect()\n    gc.freeze()\n    # main training loop\n"
            "    for epoch in range(args.epochs):",
        ],
        [],
        (0, 4),
    ),
    (
        "gpu_ddp_train.py",
        "remove-sync-batchnorm",
        None,
        ["    model = DDP(model, device_ids=[local_rank])\n"],
        ["convert_sync_batchnorm"],
        (1, 0),
    ),
    (
        "gpu_ddp_train.py",
        "ddp-bucket-overlap",
        None,
        ["model = DDP(model, device_ids=[local_rank], bucket_cap_mb=10, gradient_as_bucket_view=True)\n"],
        [],
        (1, 1),
    ),
    (
        "gpu_ddp_train.py",
        "ddp-bucket-overlap",
        {"bucket_cap_mb": 50},
        ["model = DDP(model, device_ids=[local_rank], bucket_cap_mb=50, gradient_as_bucket_view=True)\n"],
        [],
        (1, 1),
    ),
    (
        "gpu_ddp_train.py",
        "torch-fused-optimizer",
        None,
        ["optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=True)\n"],
        ["foreach"],
        (1, 1),
    ),
    (
        "gpu_ddp_train.py",
        "remove-empty-cache-in-loop",
        None,
        ["            optimizer.step()\n            if step % 50 == 0"],
        ["empty_cache", "step % 100"],
        (2, 0),
    ),
    (
        "gpu_ddp_train.py",
        "pinned-memory-non-blocking",
        None,
        [
            "images = images.to(device, non_blocking=True)",
            "labels = labels.to(device, non_blocking=True)",
            "model(images.to(device, non_blocking=True))",
            "        model.cpu().to(device)\n",
            "        pin_memory=True,\n",
        ],
        ["images.to(device)\n"],
        (4, 5),
    ),
    (
        "gpu_ddp_train.py",
        "cuda-tf32-matmul",
        None,
        [
            "from torch.utils.data import DataLoader, DistributedSampler\n"
            'torch.set_float32_matmul_precision("high")\n'
        ],
        [],
        (0, 1),
    ),
    (
        "gpu_ddp_train.py",
        "static-shapes-bucketing",
        None,
        ["        drop_last=True,\n", "num_workers=2, drop_last=True)"],
        [],
        (1, 2),
    ),
    (
        "npu_train.py",
        "npu-fused-optimizer",
        None,
        [
            "    optimizer = torch_npu.optim.NpuFusedAdamW(model.parameters(), lr=args.lr, "
            "weight_decay=0.05)\n"
        ],
        ["foreach", "optim.AdamW"],
        (2, 1),
    ),
    (
        "npu_train.py",
        "npu-jit-compile-off",
        None,
        [
            "from mymodels import build_swin, build_dataset\n"
            "torch_npu.npu.set_compile_mode(jit_compile=False)\n"
            "torch_npu.npu.config.allow_internal_format = False\n"
        ],
        [],
        (0, 2),
    ),
    (
        "npu_train.py",
        "npu-hf32-matmul",
        None,
        ["from mymodels import build_swin, build_dataset\ntorch.npu.matmul.allow_hf32 = True\n"],
        [],
        (0, 1),
    ),
    (
        "npu_train.py",
        "remove-empty-cache-in-loop",
        None,
        ["            step += 1\n    torch.npu.empty_cache()\n"],
        ["optimizer.zero_grad()\n            torch.npu"],
        (1, 0),
    ),
    ("npu_train.py", "remove-sync-batchnorm", None, [], ["SyncBatchNorm"], (1, 0)),
    (
        "npu_train.py",
        "ascend-launch-blocking-off",
        None,
        ['os.environ.pop("ASCEND_LAUNCH_BLOCKING", None)\n'],
        ['os.environ["ASCEND_LAUNCH_BLOCKING"]'],
        (1, 1),
    ),
    (
        "npu_train.py",
        "npu-alloc-expandable-segments",
        None,
        ['os.environ.setdefault("PYTORCH_NPU_ALLOC_CONF", "max_split_size_mb:256,expandable_segments:True")'],
        [],
        (1, 1),
    ),
    (
        "npu_train.py",
        "gc-freeze-before-training",
        None,
        [
            "import gc\nimport os\n",
            "    step = 0\n    # stepdoctor gc-freeze-before-training"
            ": keep set-up objects out of every later GC pass\n"
            "    gc.collect()\n    gc.freeze()\n    while step <",
        ],
        [],
        (0, 4),
    ),
    (
        "npu_train.py",
        "dataloader-workers-pin-memory",
        None,
        ["shuffle=True, num_workers=args.workers,\n                        pin_memory=True)\n"],
        [],
        (1, 2),
    ),
    (
        "ms_train.py",
        "mindspore-map-parallel-workers",
        None,
        ['data = data.map(operations=trans, input_columns="image", num_parallel_workers=8)\n'],
        [],
        (1, 1),
    ),
    (
        "ms_train.py",
        "mindspore-map-parallel-workers",
        {"num_parallel_workers": 12},
        ['data = data.map(operations=trans, input_columns="image", num_parallel_workers=12)\n'],
        [],
        (1, 1),
    ),
    (
        "ms_train.py",
        "mindspore-amp-o2",
        None,
        ['model = Model(net, loss_fn=loss, optimizer=opt, metrics={"acc"}, amp_level="O2")\n'],
        [],
        (1, 1),
    ),
    (
        "ms_train.py",
        "allreduce-fusion-split",
        {"all_reduce_fusion_config": [85, 160]},
        [
            "device_num=get_group_size(),\n"
            "                                      all_reduce_fusion_config=[85, 160])\n"
        ],
        ["comm_fusion"],
        (1, 2),
    ),
    (
        "ms_train.py",
        "allreduce-fusion-split",
        None,
        [
            "device_num=get_group_size(),\n                                      "
            'comm_fusion={"allreduce": {"mode": "size", "config": 32}})\n'
        ],
        ["all_reduce_fusion_config"],
        (1, 2),
    ),
    (
        "ms_train.py",
        "gc-freeze-before-training",
        None,
        [
            '"""\nimport gc\n\nimport mindspore as ms\n',
            "    gc.collect()\n    gc.freeze()\n    model.train(90, train_ds",
        ],
        [],
        (0, 5),
    ),
    (
        "run.sh",
        "ascend-launch-blocking-off",
        None,
        ["\nunset ASCEND_LAUNCH_BLOCKING\nexport ASCEND_GLOBAL_LOG_LEVEL=1\n"],
        ["ASCEND_LAUNCH_BLOCKING=1"],
        (1, 1),
    ),
    (
        "run.sh",
        "ascend-log-level-error",
        None,
        ["export ASCEND_GLOBAL_LOG_LEVEL=3\n"],
        ["ASCEND_GLOBAL_LOG_LEVEL=1", "ASCEND_SLOG_PRINT_TO_STDOUT"],
        (1, 1),
    ),
    (
        "run.sh",
        "npu-alloc-expandable-segments",
        None,
        ['export PYTORCH_NPU_ALLOC_CONF="max_split_size_mb:128,expandable_segments:True"\n'],
        [],
        (1, 1),
    ),
    (
        "run.sh",
        "hccl-algo-unset",
        None,
        ["unset HCCL_ALGO\nexport HCCL_CONNECT_TIMEOUT=1200\n"],
        ["HCCL_ALGO="],
        (1, 1),
    ),
    (
        "run.sh",
        "aclnn-cache-limit",
        None,
        ["MASTER_ADDR=127.0.0.1\nexport ACLNN_CACHE_LIMIT=100000\ntorchrun --nproc_per_node=8"],
        [],
        (0, 1),
    ),
    ("run.sh", "host-cache-capacity", None, ["export HOST_CACHE_CAPACITY=20\ntorchrun"], [], (0, 1)),
    (
        "run.sh",
        "npu-task-queue-cpu-affinity",
        None,
        ["export TASK_QUEUE_ENABLE=2\nexport CPU_AFFINITY_CONF=1\ntorchrun"],
        [],
        (0, 2),
    ),
    (
        "run.sh",
        "cuda-launch-blocking-off",
        None,
        ["MASTER_ADDR=127.0.0.1\nunset CUDA_LAUNCH_BLOCKING\ntorchrun"],
        ["HIP_LAUNCH_BLOCKING", "AMD_SERIALIZE_KERNEL"],
        (0, 1),
    ),
    (
        "run_gpu.sh",
        "cuda-launch-blocking-off",
        None,
        [
            "export NCCL_IB_DISABLE=1\nunset CUDA_LAUNCH_BLOCKING\n"
            "torchrun --nnodes=2 --nproc_per_node=8 gpu_ddp_train.py --epochs 90\n"
        ],
        ["CUDA_LAUNCH_BLOCKING=1", "HIP_LAUNCH_BLOCKING"],
        (1, 2),
    ),
    (
        "run_gpu.sh",
        "nccl-transports-enabled",
        None,
        ["export NCCL_DEBUG=WARN\nunset NCCL_IB_DISABLE\n"],
        ["NCCL_IB_DISABLE=1", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"],
        (1, 1),
    ),
    (
        "run_gpu.sh",
        "nccl-transports-enabled",
        {"env": ["NCCL_P2P_DISABLE", "NCCL_IB_DISABLE"]},
        ["unset NCCL_IB_DISABLE\nunset NCCL_P2P_DISABLE\nCUDA_LAUNCH_BLOCKING=1 torchrun"],
        ["NCCL_SHM_DISABLE"],
        (1, 2),
    ),
]


@pytest.mark.parametrize(
    ("name", "fix_id", "params", "present", "absent", "counts"),
    CASES,
    ids=[f"{c[0]}-{c[1]}{'-params' if c[2] else ''}" for c in CASES],
)
def test_suggest_edit_applies_and_is_idempotent(tmp_path, name, fix_id, params, present, absent, counts):
    path = _copy(tmp_path, name)
    original = path.read_text(encoding="utf-8")
    result = _suggest(path, fix_id, params)
    patched = _check_applies(tmp_path, name, result)
    for text in present:
        assert text in patched, f"missing:\n{text}\n--- patched ---\n{patched}"
    for text in absent:
        assert text not in patched, f"still there: {text}"
    removed, added = _changed_lines(result.diff)
    assert (len(removed), len(added)) == counts, result.diff
    assert path.read_text(encoding="utf-8") == original, "suggest_edit must not write the file"
    assert result.locations and all(loc.line >= 1 for loc in result.locations)
    assert fix_id in result.message

    # Running the same fix on the patched file changes nothing.
    path.write_text(patched, encoding="utf-8")
    again = _suggest(path, fix_id, params)
    assert not again.changed and again.diff == "", again.message
    assert again.status in ("already-applied", "no-spot")


ALREADY_FIXED = [
    (
        "gpu_ddp_train_fixed.py",
        [
            "dataloader-workers-pin-memory",
            "gc-freeze-before-training",
            "ddp-bucket-overlap",
            "torch-fused-optimizer",
            "pinned-memory-non-blocking",
            "cuda-tf32-matmul",
            "static-shapes-bucketing",
        ],
    ),
    (
        "npu_train_fixed.py",
        [
            "npu-fused-optimizer",
            "npu-jit-compile-off",
            "gc-freeze-before-training",
            "pinned-memory-non-blocking",
        ],
    ),
    (
        "ms_train_fixed.py",
        [
            "mindspore-map-parallel-workers",
            "mindspore-amp-o2",
            "allreduce-fusion-split",
            "gc-freeze-before-training",
            "static-shapes-bucketing",
            "mindspore-graph-mode-sink",
        ],
    ),
    (
        "run_fixed.sh",
        [
            "ascend-launch-blocking-off",
            "ascend-log-level-error",
            "npu-alloc-expandable-segments",
            "hccl-algo-unset",
            "aclnn-cache-limit",
            "host-cache-capacity",
            "npu-task-queue-cpu-affinity",
        ],
    ),
    ("ms_train.py", ["mindspore-graph-mode-sink"]),
]


@pytest.mark.parametrize(("name", "fix_id"), [(n, f) for n, fs in ALREADY_FIXED for f in fs])
def test_scripts_that_already_have_the_fix_are_left_alone(name, fix_id):
    result = suggest_edit(SCRIPTS / name, fix_id, root=SCRIPTS)
    assert not result.changed, result.diff
    assert result.status == "already-applied", result.message
    assert result.diff == "" and result.patched_text is None
    assert "already applied" in result.message
    assert result.locations


@pytest.mark.parametrize(
    ("name", "fix_id"),
    [
        ("gpu_ddp_train_fixed.py", "remove-empty-cache-in-loop"),
        ("gpu_ddp_train_fixed.py", "remove-sync-batchnorm"),
        ("npu_train_fixed.py", "remove-empty-cache-in-loop"),
        ("npu_train_fixed.py", "remove-sync-batchnorm"),
    ],
)
def test_removal_fixes_with_nothing_to_remove(name, fix_id):
    result = suggest_edit(SCRIPTS / name, fix_id, root=SCRIPTS)
    assert not result.changed and result.status == "no-spot"
    assert "nothing to remove" in result.message


def test_no_spot_returns_the_template():
    result = suggest_edit(SCRIPTS / "gpu_ddp_train.py", "allreduce-fusion-split", root=SCRIPTS)
    assert result.status == "no-spot" and not result.changed and result.diff == ""
    assert "no place to apply it automatically" in result.message
    assert result.template and "all_reduce_fusion_config=[85, 160]" in result.template

    env = suggest_edit(SCRIPTS / "gpu_ddp_train.py", "aclnn-cache-limit", root=SCRIPTS)
    assert env.status == "no-spot" and "export ACLNN_CACHE_LIMIT=100000" in (env.template or "")

    manual = suggest_edit(SCRIPTS / "npu_train.py", "npu-rms-norm", root=SCRIPTS)
    assert manual.status == "no-spot" and "torch_npu.npu_rms_norm(x, self.weight" in (manual.template or "")

    shell = suggest_edit(SCRIPTS / "run.sh", "gc-freeze-before-training", root=SCRIPTS)
    assert shell.status == "no-spot" and "gc.freeze()" in (shell.template or "")


def _keywords(source: str, target: str) -> list[str]:
    """Keyword names of the call assigned to `target` in `source`."""
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == target
            and isinstance(node.value, ast.Call)
        ):
            return [k.arg or "**" for k in node.value.keywords]
    raise AssertionError(f"no call assigned to {target}")


HELP_LINE = 'HELP = "call DataLoader(ds) with workers"\n'


def test_matching_uses_the_syntax_tree_not_text(tmp_path):
    code = (
        "import torch\n"
        "from torch.utils.data import DataLoader as DL\n"
        "from mylib import DataLoader\n"
        "\n"
        "# DataLoader(dataset) in a comment stays as it is\n" + HELP_LINE + "a = DL(dataset, batch_size=8)\n"
        "b = DataLoader(dataset)\n"
        "c = torch.utils.data.DataLoader(dataset, **opts)\n"
    )
    path = tmp_path / "train.py"
    path.write_text(code, encoding="utf-8")
    result = _suggest(path, "dataloader-workers-pin-memory")
    patched = result.patched_text or ""
    assert _keywords(patched, "a") == [
        "batch_size",
        "num_workers",
        "pin_memory",
        "persistent_workers",
        "prefetch_factor",
    ]
    # The long call wraps under its first argument instead of running past 100 characters.
    assert (
        "a = DL(dataset, batch_size=8, num_workers=4, pin_memory=True, persistent_workers=True,\n"
        "       prefetch_factor=4)\n" in patched
    )
    assert "b = DataLoader(dataset)\n" in patched  # mylib.DataLoader is not torch's
    assert "c = torch.utils.data.DataLoader(dataset, **opts)\n" in patched  # **opts may carry the keywords
    assert "# DataLoader(dataset) in a comment stays as it is\n" in patched and HELP_LINE in patched
    assert "forwards **kwargs" in result.message
    removed, added = _changed_lines(result.diff)
    assert removed == ["a = DL(dataset, batch_size=8)"] and len(added) == 2


def test_edits_keep_crlf_unicode_and_a_missing_final_newline(tmp_path):
    code = (
        "# -*- coding: utf-8 -*-\r\nimport torch\r\nfrom torch.utils.data import DataLoader\r\n"
        'name = "données"; loader = DataLoader(ds, batch_size=4)  # «commentaire»\r\n'
        "model = torch.nn.parallel.DistributedDataParallel(model)"
    )
    path = tmp_path / "crlf.py"
    path.write_bytes(code.encode("utf-8"))
    result = suggest_edits_for_fixes(
        path, ["dataloader-workers-pin-memory", "ddp-bucket-overlap"], root=tmp_path
    )
    patched = result.patched_text or ""
    assert _keywords(patched, "loader") == [
        "batch_size",
        "num_workers",
        "pin_memory",
        "persistent_workers",
        "prefetch_factor",
    ]
    assert _keywords(patched, "model") == ["bucket_cap_mb", "gradient_as_bucket_view"]
    # Columns are counted in characters, not UTF-8 bytes: the edit lands inside the call and the comment
    # after it survives.
    assert 'name = "données"; loader = DataLoader(ds, batch_size=4, num_workers=4,' in patched
    assert "prefetch_factor=4)  # «commentaire»\r\n" in patched
    assert patched.endswith("gradient_as_bucket_view=True)")
    assert "\n" not in patched.replace("\r\n", "")
    assert "\\ No newline at end of file" in result.diff
    if HAS_GIT:
        work = tmp_path / "repo"
        work.mkdir()
        (work / "crlf.py").write_bytes(code.encode("utf-8"))
        _git_apply(work, result.diff)
        assert (work / "crlf.py").read_bytes().decode("utf-8") == patched


def test_combined_fixes_make_one_diff_with_original_line_numbers(tmp_path):
    name = "gpu_ddp_train.py"
    path = _copy(tmp_path, name)
    original_lines = path.read_text(encoding="utf-8").splitlines()
    fix_ids = [
        "gc-freeze-before-training",
        "dataloader-workers-pin-memory",
        "remove-sync-batchnorm",
        "ddp-bucket-overlap",
        "torch-fused-optimizer",
        "remove-empty-cache-in-loop",
    ]
    result = suggest_edits_for_fixes(path, fix_ids, root=tmp_path)
    assert result.fix == ",".join(fix_ids)
    patched = _check_applies(tmp_path, name, result)
    for text in ("import gc\n", "gc.freeze()", "persistent_workers=True", "bucket_cap_mb=10", "fused=True"):
        assert text in patched
    for text in ("convert_sync_batchnorm", "empty_cache", "foreach"):
        assert text not in patched
    ddp_line = next(i for i, line in enumerate(original_lines, 1) if "model = DDP(" in line)
    adamw_line = next(i for i, line in enumerate(original_lines, 1) if "torch.optim.AdamW" in line)
    cache_line = next(i for i, line in enumerate(original_lines, 1) if "empty_cache" in line)
    by_text = {loc.what: loc.line for loc in result.locations}
    assert by_text["DDP(...): added bucket_cap_mb=10, gradient_as_bucket_view=True"] == ddp_line
    assert by_text["torch.optim.AdamW(...): added fused=True; removed foreach="] == adamw_line
    assert by_text["removed torch.cuda.empty_cache()"] == cache_line
    for fix_id in fix_ids:
        assert f"{fix_id}: proposes an edit of" in result.message
    # Combined twice: nothing left to do.
    path.write_text(patched, encoding="utf-8")
    again = suggest_edits_for_fixes(path, fix_ids, root=tmp_path)
    assert not again.changed


def test_apply_edit_writes_the_file_and_keeps_numbered_backups(tmp_path):
    path = _copy(tmp_path, "gpu_ddp_train.py")
    original = path.read_text(encoding="utf-8")
    result = _suggest(path, "ddp-bucket-overlap")
    backup = apply_edit(result)
    assert backup == tmp_path / "gpu_ddp_train.py.bak"
    assert backup.read_text(encoding="utf-8") == original
    assert path.read_text(encoding="utf-8") == result.patched_text

    second = _suggest(path, "torch-fused-optimizer")
    backup2 = apply_edit(second)
    assert backup2 == tmp_path / "gpu_ddp_train.py.bak.1"
    assert backup2.read_text(encoding="utf-8") == result.patched_text
    assert backup.read_text(encoding="utf-8") == original  # never overwritten
    assert path.read_text(encoding="utf-8") == second.patched_text

    third = _suggest(path, "gc-freeze-before-training")
    assert apply_edit(third, backup=False) is None
    assert path.read_text(encoding="utf-8") == third.patched_text
    assert not (tmp_path / "gpu_ddp_train.py.bak.2").exists()

    unchanged = _suggest(path, "ddp-bucket-overlap")
    before = path.read_text(encoding="utf-8")
    assert apply_edit(unchanged) is None and path.read_text(encoding="utf-8") == before


def test_apply_edit_refuses_stale_or_rebuilt_results(tmp_path):
    path = _copy(tmp_path, "ms_train.py")
    result = _suggest(path, "mindspore-amp-o2")
    rebuilt = EditResult.model_validate_json(result.model_dump_json())
    assert "patched_text" not in result.model_dump()
    with pytest.raises(ValueError, match="no patched text"):
        apply_edit(rebuilt)
    path.write_text(path.read_text(encoding="utf-8") + "\n# edited meanwhile\n", encoding="utf-8")
    with pytest.raises(EditConflictError):
        apply_edit(result)
    assert not (tmp_path / "ms_train.py.bak").exists()


def test_params_are_validated_and_rendered_as_literals(tmp_path):
    path = _copy(tmp_path, "ms_train_fixed.py")
    result = _suggest(path, "mindspore-map-parallel-workers", {"num_parallel_workers": 16})
    assert "num_parallel_workers=16)" in (result.patched_text or "")
    removed, added = _changed_lines(result.diff)
    assert len(removed) == len(added) == 1

    # A caller's split indices replace an existing configuration; without them it counts as configured.
    fusion = _suggest(path, "allreduce-fusion-split", {"all_reduce_fusion_config": [40, 120]})
    assert "all_reduce_fusion_config=[40, 120])" in (fusion.patched_text or "")
    assert not _suggest(path, "allreduce-fusion-split").changed

    gpu = _copy(tmp_path, "gpu_ddp_train.py")
    odd = _suggest(gpu, "ddp-bucket-overlap", {"bucket_cap_mb": "__import__('os')"})
    tree = ast.parse(odd.patched_text or "")
    values = [
        k.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        for k in n.keywords
        if k.arg == "bucket_cap_mb"
    ]
    assert len(values) == 1 and isinstance(values[0], ast.Constant) and values[0].value == "__import__('os')"
    with pytest.raises(TypeError, match="bucket_cap_mb"):
        _suggest(gpu, "ddp-bucket-overlap", {"bucket_cap_mb": object()})


def test_shell_quoting_options_and_insertion_point(tmp_path):
    path = tmp_path / "launch.sh"
    path.write_text(
        "#!/bin/sh\n# tuned by hand\n\nexport PYTORCH_NPU_ALLOC_CONF='expandable_segments:False'\n"
        "ASCEND_LAUNCH_BLOCKING=1 HCCL_ALGO=ring python train.py \\\n    --epochs 3\n",
        encoding="utf-8",
    )
    result = suggest_edits_for_fixes(
        path,
        ["npu-alloc-expandable-segments", "ascend-launch-blocking-off", "hccl-algo-unset"],
        root=tmp_path,
    )
    patched = result.patched_text or ""
    assert "export PYTORCH_NPU_ALLOC_CONF='expandable_segments:True'\n" in patched
    assert "\nunset ASCEND_LAUNCH_BLOCKING\nunset HCCL_ALGO\npython train.py \\\n    --epochs 3\n" in patched
    assert "ASCEND_LAUNCH_BLOCKING=" not in patched and "HCCL_ALGO=" not in patched
    if HAS_GIT:
        work = tmp_path / "repo"
        work.mkdir()
        shutil.copyfile(path, work / "launch.sh")
        _git_apply(work, result.diff)

    bare = tmp_path / "bare.sh"
    bare.write_text("#!/bin/bash\n# nothing else\n", encoding="utf-8")
    added = suggest_edit(bare, "aclnn-cache-limit", root=tmp_path)
    assert added.patched_text == "#!/bin/bash\n# nothing else\nexport ACLNN_CACHE_LIMIT=100000\n"


def test_bad_inputs_raise_clear_errors(tmp_path):
    with pytest.raises(KeyError, match="did you mean"):
        suggest_edit(SCRIPTS / "run.sh", "gc-freez")
    with pytest.raises(FileNotFoundError):
        suggest_edit(tmp_path / "missing.py", "gc-freeze-before-training")
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not a Python file"):
        suggest_edit(notes, "gc-freeze-before-training")
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n", encoding="utf-8")
    with pytest.raises(ValueError, match="cannot parse"):
        suggest_edit(broken, "gc-freeze-before-training")
    with pytest.raises(ValueError, match="no fix ids"):
        suggest_edits_for_fixes(SCRIPTS / "run.sh", [])


def test_insert_after_import_adds_the_import_only_to_files_that_use_torch(tmp_path):
    # A script that names no device takes the NPU settings after its torch imports.
    neutral = tmp_path / "neutral.py"
    neutral.write_text(
        "import torch\nfrom torch.utils.data import DataLoader, DistributedSampler\n\n"
        "model = torch.nn.Linear(2, 2)\n",
        encoding="utf-8",
    )
    patched = _suggest(neutral, "npu-jit-compile-off").patched_text or ""
    ast.parse(patched)
    assert (
        "from torch.utils.data import DataLoader, DistributedSampler\nimport torch_npu\n"
        "torch_npu.npu.set_compile_mode(jit_compile=False)\n"
        "torch_npu.npu.config.allow_internal_format = False\n"
    ) in patched

    # A script that runs on CUDA is never ported to torch_npu behind the user's back.
    gpu = _copy(tmp_path, "gpu_ddp_train.py")
    result = _suggest(gpu, "npu-jit-compile-off")
    assert result.diff == "" and result.status == "no-spot"
    assert "this edit brings in ascend APIs; the file runs on cuda" in result.message

    plain = tmp_path / "tool.py"
    plain.write_text("import json\n\nprint(json.dumps({}))\n", encoding="utf-8")
    other = _suggest(plain, "npu-jit-compile-off")
    assert other.status == "no-spot" and "imports none of torch, torch_npu" in other.message

    # A setting that exists with another value is corrected where it is, not duplicated.
    npu = tmp_path / "npu.py"
    npu.write_text(
        "import torch\nimport torch_npu\n\n\ndef setup():\n"
        "    torch_npu.npu.set_compile_mode(jit_compile=True)\n",
        encoding="utf-8",
    )
    fixed = _suggest(npu, "npu-jit-compile-off").patched_text or ""
    assert fixed.count("set_compile_mode") == 1
    assert "    torch_npu.npu.set_compile_mode(jit_compile=False)\n" in fixed
    assert "import torch_npu\ntorch_npu.npu.config.allow_internal_format = False\n" in fixed


def test_training_loop_detection_prefers_the_real_training_loop(tmp_path):
    code = (
        "import torch\n\n\n"
        "def main(data, train_loader, model, opt):\n"
        "    for item in data:\n"
        "        item.check()\n"
        "    for batch in train_loader:\n"
        "        model(batch).sum().backward()\n"
        "        opt.step()\n"
    )
    path = tmp_path / "loop.py"
    path.write_text(code, encoding="utf-8")
    patched = _suggest(path, "gc-freeze-before-training").patched_text or ""
    assert "        item.check()\n    # stepdoctor gc-freeze" in patched
    assert "    gc.freeze()\n    for batch in train_loader:\n" in patched
    assert patched.startswith("import gc\n\nimport torch\n")

    ms = tmp_path / "ms_loop.py"
    ms.write_text(
        "import mindspore as ms\n\n"
        "for data in dataset.create_tuple_iterator():\n    loss = train_net(*data)\n",
        encoding="utf-8",
    )
    ms_patched = _suggest(ms, "gc-freeze-before-training").patched_text or ""
    assert "gc.freeze()\nfor data in dataset.create_tuple_iterator():\n" in ms_patched

    none = tmp_path / "none.py"
    none.write_text("for key in data:\n    print(key)\n", encoding="utf-8")
    result = _suggest(none, "gc-freeze-before-training")
    assert result.status == "no-spot" and "no training loop found" in result.message


def _edit_text(tmp_path: Path, code: str, fix: str) -> EditResult:
    path = tmp_path / "snippet.py"
    path.write_text(code, encoding="utf-8")
    return suggest_edit(path, fix, root=tmp_path)


def test_sync_guards_go_only_where_a_tensor_is_read_every_step(tmp_path):
    code = (
        "import numpy as np\nimport torch\n\n\nclass Block(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        assert torch.isfinite(x).all(), 'bad'\n"
        "        if self.debug:\n            if torch.isnan(x).any():\n                raise ValueError(x)\n"
        "        return x\n\n\n"
        "def setup(x):\n    if not torch.isfinite(x).all():\n        raise ValueError('checked once')\n\n\n"
        "for step in range(10):\n    arr = np.ones(3)\n    if not arr.all():\n        raise ValueError('numpy')\n"
        "    if torch.isnan(loss):\n        print('nan')\n    else:\n        pass\n"
    )
    res = _edit_text(tmp_path, code, "remove-host-device-syncs")
    patched = res.patched_text or ""
    assert "assert torch.isfinite" not in patched and "torch.isnan(x).any()" not in patched
    assert "        if self.debug:\n            pass\n" in patched  # the emptied block keeps a pass
    assert "raise ValueError('checked once')" in patched  # set-up code runs once: kept
    assert "raise ValueError('numpy')" in patched  # NumPy is no device sync
    assert "print('nan')" in patched  # an if with an else branch is logic, not a guard
    ast.parse(patched)
    assert [loc.line for loc in res.locations] == [7, 9]


def test_unwrap_with_keeps_other_backends_and_imports_still_used(tmp_path):
    code = (
        "import torch.nn.functional as F\nfrom torch.nn.attention import SDPBackend, sdpa_kernel\n\n\n"
        "def attn(q, k, v):\n"
        "    with sdpa_kernel(SDPBackend.MATH):\n"
        "        y = F.scaled_dot_product_attention(\n    q, k, v)  # odd indent\n\n        y = y * 2\n"
        "    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):\n        z = F.scaled_dot_product_attention(q, k, v)\n"
        "    return y, z\n"
    )
    res = _edit_text(tmp_path, code, "sdpa-fused-backend")
    patched = res.patched_text or ""
    assert "SDPBackend.MATH" not in patched
    assert "    y = F.scaled_dot_product_attention(\nq, k, v)  # odd indent\n\n    y = y * 2\n" in patched
    assert "with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):" in patched  # a fused backend choice stays
    assert "from torch.nn.attention import SDPBackend, sdpa_kernel\n" in patched  # still used below
    ast.parse(patched)


def test_set_attribute_and_disabled_autocast(tmp_path):
    code = (
        "import torch\nimport torch.backends.cudnn as cudnn\n\nflag = False\n"
        "torch.backends.cuda.matmul.allow_tf32 = flag\ncudnn.allow_tf32 = False\n"
        "with torch.autocast('cuda'):\n    pass\nwith torch.autocast('cuda', enabled=False):\n    pass\n"
    )
    tf32 = _edit_text(tmp_path, code, "cuda-tf32-matmul")
    patched = tf32.patched_text or ""
    assert "allow_tf32 = flag\n" in patched and "cudnn.allow_tf32 = True\n" in patched  # alias resolved
    assert "set_float32_matmul_precision" not in patched  # the file sets TF32 itself: no second switch
    assert "set from an expression; kept" in tf32.message
    amp = _edit_text(tmp_path, code, "torch-autocast-bf16")
    assert _changed_lines(amp.diff) == (
        ["with torch.autocast('cuda', enabled=False):"],
        ["with torch.autocast('cuda', dtype=torch.bfloat16):"],
    )


def test_periodic_collect_needs_a_step_counter(tmp_path):
    loop = "import gc\n\nfor batch in loader:\n    loss = model(batch)\n    loss.backward()\n"
    res = _edit_text(tmp_path, loop, "gc-disable-collect-periodically")
    assert res.status == "no-spot" and "step counter" in res.message and res.template
    counted = (
        "import torch\n\nfor step, batch in enumerate(loader):\n    loss = model(batch)\n"
        "    loss.backward()\n    continue\n"
    )
    patched = _edit_text(tmp_path, counted, "gc-disable-collect-periodically").patched_text or ""
    assert "import gc\n" in patched and "gc.disable()\nfor step" in patched
    # the collect goes before the trailing jump, where it runs
    assert "    loss.backward()\n    if step % 100 == 0:\n        gc.collect()\n    continue\n" in patched
    again = tmp_path / "again.py"
    again.write_text(patched, encoding="utf-8")
    assert suggest_edit(again, "gc-disable-collect-periodically", root=tmp_path).status == "already-applied"


def test_apply_edit_edits_the_file_the_user_means_and_keeps_its_metadata(tmp_path):
    import os
    import stat

    real = _copy(tmp_path, "gpu_ddp_train.py")
    os.chmod(real, 0o640)
    link = tmp_path / "train_link.py"
    link.symlink_to(real)
    result = _suggest(link, "ddp-bucket-overlap")
    apply_edit(result, backup=False)
    assert link.is_symlink() and link.resolve() == real          # the link stays a link ...
    assert real.read_text(encoding="utf-8") == result.patched_text  # ... and the file it names is edited
    assert stat.S_IMODE(real.stat().st_mode) == 0o640

    other = tmp_path / "hard_name.py"
    os.link(real, other)
    second = _suggest(real, "torch-fused-optimizer")
    apply_edit(second, backup=False)
    assert os.path.samefile(real, other) and other.read_text(encoding="utf-8") == second.patched_text


def test_apply_edit_keeps_a_save_made_while_it_writes(tmp_path, monkeypatch):
    import tempfile

    path = _copy(tmp_path, "gpu_ddp_train.py")
    result = _suggest(path, "ddp-bucket-overlap")
    real_mkstemp = tempfile.mkstemp

    def user_saves_meanwhile(*a, **kw):
        out = real_mkstemp(*a, **kw)
        path.write_text(path.read_text(encoding="utf-8") + "# the user's save\n", encoding="utf-8")
        return out

    monkeypatch.setattr(tempfile, "mkstemp", user_saves_meanwhile)
    with pytest.raises(EditConflictError, match="changed since the edit was suggested"):
        apply_edit(result, backup=False)
    assert path.read_text(encoding="utf-8").endswith("# the user's save\n")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]   # no temporary left behind
