"""A Hydra launcher on Ray Core: every job of a multirun is one Ray task with the job's resources.

Ray places each task on a node with the requested CPUs, GPUs (it sets ``CUDA_VISIBLE_DEVICES`` to the task's
own GPUs) and custom resources, and reruns a task whose worker process died (``max_retries``). A rerun job has
the same run dir, so a sharded job resumes from its node-local state when it lands on the same node. The
driver waits for every job and stops with the overrides of each job that failed. Ray is imported only here,
when a sweep launches.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)


def _execute_job(idx: int, overrides: Sequence[str], hydra_context: HydraContext, config: DictConfig,
                 task_function: TaskFunction, singleton_state: Dict[Any, Any]) -> JobReturn:
    """One job in a Ray worker, as Hydra's own launchers run it (the sweep config loaded there)."""
    from hydra.core.hydra_config import HydraConfig

    setup_globals()
    Singleton.set_state(singleton_state)
    sweep_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{idx}"
        sweep_config.hydra.job.num = idx
    HydraConfig.instance().set_config(sweep_config)
    return run_job(hydra_context=hydra_context, config=sweep_config, task_function=task_function,
                   job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def start_ray(address: Optional[str], init: Dict[str, Any], runtime_env: Optional[Dict[str, Any]]) -> bool:
    """Connect to (or start) Ray; True when this call started a new local Ray."""
    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    kwargs = {k: v for k, v in init.items() if v is not None}
    if runtime_env:
        kwargs["runtime_env"] = runtime_env
    log.info("ray.init(address=%s, %s)", address, kwargs)
    ray.init(address=address, **kwargs)
    return address is None


def check_resources(total: Dict[str, float], need: Dict[str, float], local: bool) -> None:
    """A job asking for more than a local Ray has would wait forever: stop, naming what is missing."""
    short = {k: v for k, v in need.items() if v > 0 and total.get(k, 0.0) < v}
    if not short:
        return
    msg = ", ".join(f"{k}={v:g} (the cluster has {total.get(k, 0.0):g})" for k, v in short.items())
    if local:
        raise RuntimeError(f"hydra/launcher=ray: each job asks for {msg} on a local Ray with {total}: set "
                           "hydra.launcher.num_gpus / num_cpus / resources, or ray.init's through hydra.launcher.init")
    log.warning("each job asks for %s: it waits until the cluster (autoscaler) provides it", msg)


class RayLauncher(Launcher):
    def __init__(self, address: Optional[str] = None, num_cpus: float = 1.0, num_gpus: float = 0.0,
                 resources: Optional[Dict[str, float]] = None, max_retries: int = 3,
                 init: Optional[Dict[str, Any]] = None, runtime_env: Optional[Dict[str, Any]] = None) -> None:
        self.address = address
        self.num_cpus, self.num_gpus = float(num_cpus), float(num_gpus)
        self.resources = dict(_plain(resources) or {})
        self.max_retries = int(max_retries)
        self.init = dict(_plain(init) or {})
        self.runtime_env = _plain(runtime_env)
        self.config: Optional[DictConfig] = None
        self.task_function: Optional[TaskFunction] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import ray

        assert self.config is not None and self.task_function is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        local = start_ray(self.address, self.init, self.runtime_env)
        check_resources(ray.cluster_resources(), {"CPU": self.num_cpus, "GPU": self.num_gpus, **self.resources},
                        local)
        remote = ray.remote(num_cpus=self.num_cpus, num_gpus=self.num_gpus, resources=self.resources or None,
                            max_retries=self.max_retries, retry_exceptions=False)(_execute_job)
        log.info("Ray launcher: %d jobs (each num_cpus=%g num_gpus=%g resources=%s max_retries=%d), sweep dir %s",
                 len(job_overrides), self.num_cpus, self.num_gpus, self.resources, self.max_retries, sweep_dir)
        singleton_state = Singleton.get_state()
        refs = []
        for k, overrides in enumerate(job_overrides):
            idx = initial_job_idx + k
            log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
            refs.append(remote.remote(idx, list(overrides), self.hydra_context, self.config, self.task_function,
                                      singleton_state))
        results: List[JobReturn] = []
        failed = []
        for overrides, ref in zip(job_overrides, refs):
            try:
                results.append(ray.get(ref))
            except Exception as exc:  # noqa: BLE001 - the task's worker died more often than max_retries
                failed.append(f"{' '.join(filter_overrides(overrides))}: {type(exc).__name__}: {exc}")
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(refs)} Ray jobs were lost (after {self.max_retries} "
                               "retries each):\n" + "\n".join(failed))
        return results
