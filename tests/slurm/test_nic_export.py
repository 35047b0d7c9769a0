"""nic-affinity's Slurm forms against real Slurm: the ``--export`` flag reaches the task with
NCCL's exact-match ``=`` intact, and so do the batch-script lines with ``--export=ALL`` for a
list with commas (which ``--export`` itself would split).
"""

from __future__ import annotations

from pathlib import Path

from toposcope.advisor.nic_advice import hca_value, nccl_env, slurm_forms
from toposcope.slurm.daemons import wait_for
from toposcope.slurm.localcluster import LocalCluster


def nccl_vars(text: str) -> dict[str, str]:
    """The ``NCCL_*`` lines of ``env``'s output."""
    pairs = (line.split("=", 1) for line in text.splitlines() if line.startswith("NCCL_"))
    return {name: value for name, value in pairs}


def test_the_export_flag_gives_the_task_the_exact_environment(slurm: LocalCluster) -> None:
    env = nccl_env(hca_value([("mlx5_0", ("1",))]), "PIX", True)
    node = slurm.node_names[0]
    forms = slurm_forms(env, "1", node)
    out = slurm.command("srun", "-N1", "-n1", "-w", node, forms["export_flag"], "env")
    assert (
        nccl_vars(out)
        == env
        == {
            "NCCL_IB_HCA": "=mlx5_0:1",
            "NCCL_NET_GDR_LEVEL": "PIX",
            "NCCL_CROSS_NIC": "0",
        }
    )


def test_the_batch_lines_give_every_task_a_list_with_commas(
    slurm: LocalCluster, tmp_path: Path
) -> None:
    env = nccl_env(hca_value([("mlx5_0", ("1",)), ("mlx5_1", ("1",))]), "PXB", False)
    node = slurm.node_names[1]
    forms = slurm_forms(env, "1", node)
    assert "export_flag" not in forms
    *exports, launch = forms["script_lines"]
    assert launch == "srun --export=ALL ..."
    output = tmp_path / "nic-export.out"
    script = "\n".join([*exports, "srun --export=ALL -n1 env"])
    job = slurm.sbatch("-w", node, "-o", str(output), "--wrap", script)
    wait_for(lambda: str(job) not in slurm.command("squeue", "-h", "-o", "%A"), "job done", 60)
    assert nccl_vars(output.read_text()) == {
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
        "NCCL_NET_GDR_LEVEL": "PXB",
    }
