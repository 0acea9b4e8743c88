"""The launcher's settings (``hydra.launcher.*``; conf/hydra/launcher/ray.yaml sets Mnemis's defaults)."""

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class RayLauncherConf:
    _target_: str = "hydra_plugins.mnemis_ray_launcher.ray_launcher.RayLauncher"
    # the cluster: null = $RAY_ADDRESS when set (an existing cluster, e.g. KubeRay's head service), else a new
    # local Ray on this node with all its CPUs and GPUs; "auto" = the cluster this node already belongs to
    address: Optional[str] = None
    # resources of one job (one Ray task): a GPU job gets CUDA_VISIBLE_DEVICES from Ray
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    resources: Dict[str, float] = field(default_factory=dict)  # custom resources, e.g. {"h200": 1}
    # Ray reruns a task whose worker died (killed, node lost) up to this many times; a job that raises
    # (a config error, a refused merge) is not retried
    max_retries: int = 3
    # more ray.init arguments, e.g. {num_cpus: 2, resources: {gpu_slot: 2}} for a local Ray
    init: Dict[str, Any] = field(default_factory=lambda: {"include_dashboard": False})
    runtime_env: Optional[Dict[str, Any]] = None  # e.g. {working_dir: ., env_vars: {HF_HUB_OFFLINE: "1"}}


ConfigStore.instance().store(group="hydra/launcher", name="mnemis_ray", node=RayLauncherConf,
                             provider="mnemis_ray_launcher")
