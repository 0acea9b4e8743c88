"""Config helpers: the single Hydra ``instantiate`` funnel and config hashing for artifact reuse.

Only this module and ``mnemis.app.cli`` import hydra/omegaconf; the edge reads the composed config once into typed
settings (:func:`mnemis.settings.load_settings`) and everything below gets its section.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any



def _conf_dir() -> Path:
    """The config tree: ``mnemis/conf`` inside an installed wheel, ``conf/`` at the root of a source checkout
    (pyproject's ``package-dir`` installs the one as the other)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "conf", here.parent / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"no Mnemis config tree (config.yaml) in {here / 'conf'} or {here.parent / 'conf'}: "
                            "reinstall the package (pip install mnemis) or run from a source checkout")


CONF_DIR = _conf_dir()


def _random_model(kind: str, cache_dir: str) -> str:
    """``${random_model:qwen3,${paths.cache_dir}}``: a random-weight model folder (created on first use)."""
    from mnemis.models.random_weights import same_arch_model

    return same_arch_model(kind, cache_dir)


def register_resolvers() -> None:
    """The config resolvers of ``conf/`` (idempotent; done on import of this module)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("random_model"):
        OmegaConf.register_new_resolver("random_model", _random_model, use_cache=True)


register_resolvers()


def to_plain(cfg: Any) -> Any:
    """A resolved OmegaConf node (or plain value) as plain dicts/lists."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(cfg, (DictConfig, ListConfig)):
        return OmegaConf.to_container(cfg, resolve=True)
    return cfg


def with_values(cfg: Any, values: dict[str, Any]) -> Any:
    """``cfg`` with dotted keys set (``{"paths.cache_dir": ...}``); in an OmegaConf node, in place, so every
    interpolation of those keys follows; in plain dicts, a copy with just those keys changed."""
    from omegaconf import DictConfig, OmegaConf, open_dict

    if isinstance(cfg, DictConfig):
        with open_dict(cfg):
            for key, value in values.items():
                OmegaConf.update(cfg, key, value, merge=False)
        return cfg
    import copy

    out = copy.deepcopy(cfg)
    for key, value in values.items():
        *parents, last = key.split(".")
        node = out
        for k in parents:
            node = node.setdefault(k, {})
        node[last] = value
    return out


def build(node: Any, **kwargs: Any) -> Any:
    """Instantiate a component from its config node (``_target_``), with plain-value arguments."""
    from hydra.utils import instantiate

    if node is None:
        return None
    return instantiate(node, _convert_="all", **kwargs)


def compose(overrides: list[str] | None = None, config_name: str = "config") -> Any:
    """Compose the config tree outside a Hydra app (tests, notebooks)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=list(overrides or []))


def compose_for_checks(overrides: list[str]) -> tuple[dict[str, Any], str | None]:
    """The composed config as plain values plus the Hydra launcher's ``_target_`` (``mnemis doctor``)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
    launcher = OmegaConf.select(cfg, "hydra.launcher._target_")
    with open_dict(cfg):
        del cfg["hydra"]
    return OmegaConf.to_container(cfg, resolve=True), launcher
