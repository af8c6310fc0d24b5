"""Every code sample in README.md and docs/ runs, or is checked against what it names.

- ``python`` samples are executed: each is written out as a module of its own and imported in
  a fresh process (a page's samples one after the other), so declarations are checked the way
  a user's import checks them and functions are importable by their dotted path (RQ).
- ``sh`` samples are checked command by command: ``cron-bridge`` and ``rq`` command lines are
  parsed by their own click commands (an option that does not exist fails), ``make`` targets
  must be in the Makefile, ``pip install`` extras in the package's pyproject.toml,
  ``celery ... -S`` names a registered scheduler, paths given to ``kubectl -k`` exist. Commands
  of other programs (git, curl, docker, dramatiq, export) are listed in ``NOT_CHECKED``; any
  other program fails the test.
- ``yaml`` and ``json`` samples must parse. ``text`` samples are output, not code.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import yaml

from cron_bridge.cli.main import main as cron_bridge_cli
from tests.e2e.processes import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
LANGUAGES = {"python", "sh", "yaml", "json", "text"}
NOT_CHECKED = {"git", "docker", "dramatiq", "export", "cd", "curl", "redis-server"}


@dataclass(frozen=True)
class Sample:
    page: Path
    line: int
    language: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def samples(page: Path) -> list[Sample]:
    text = page.read_text()
    return [
        Sample(page, text.count("\n", 0, m.start()) + 1, m[1], m[2]) for m in FENCE.finditer(text)
    ]


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


def test_every_sample_says_its_language() -> None:
    """A fence without a known language would escape the checks below."""
    unknown = [
        (s.where, s.language) for p in PAGES for s in samples(p) if s.language not in LANGUAGES
    ]
    assert unknown == []


WITH_PYTHON = [p for p in PAGES if any(s.language == "python" for s in samples(p))]


@pytest.mark.extras  # the samples use every adapter and store
@pytest.mark.parametrize("page", WITH_PYTHON, ids=page_id)
def test_python_samples_run(page: Path, tmp_path: Path) -> None:
    """Each python sample of the page, imported as a module of its own in a fresh process."""
    modules = []
    for number, sample in enumerate(s for s in samples(page) if s.language == "python"):
        name = f"sample_{page.stem.replace('-', '_').lower()}_{number}"
        header = f"# {sample.where}\n"
        (tmp_path / f"{name}.py").write_text(header + sample.code)
        modules.append((name, sample.where))
    runner = "\n".join(
        [
            "import importlib, sys",
            f"for name, where in {modules!r}:",
            "    try:",
            "        importlib.import_module(name)",
            "    except BaseException:",
            "        print('the sample at', where, 'failed:', file=sys.stderr)",
            "        raise",
        ]
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRON_BRIDGE_", "CB_TEST_"))}
    # The checkout first; a PYTHONPATH given too stays after it (the checkout's adapters).
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(tmp_path), str(REPO), env.get("PYTHONPATH")])
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", runner],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]


def command_lines(code: str) -> list[list[str]]:
    """The commands of a shell sample, without comments, prompts and VAR=value prefixes."""
    commands = []
    for raw in code.replace("\\\n", " ").splitlines():
        words = shlex.split(raw.removeprefix("$ "), comments=True)
        if words[-1:] == ["&"]:  # started in the background
            words = words[:-1]
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            words = words[1:]
        if words:
            commands.append(words)
    return commands


def check_click(group: click.Group, program: str, args: list[str]) -> None:
    """Parse a command line with the program's own click commands, running nothing."""
    if program == "cron-bridge" and args[:1] == ["--log-level"]:
        args = args[2:]
    root = click.Context(group, info_name=program)
    command = group.get_command(root, args[0])
    assert command is not None, f"no {program} command {args[0]!r}"
    with command.make_context(args[0], args[1:], parent=root):
        pass


def check_command(words: list[str]) -> None:
    program, args = words[0], words[1:]
    if program == "cron-bridge":
        check_click(cron_bridge_cli, program, args)
    elif program == "rq":
        from rq.cli import main as rq_cli

        check_click(rq_cli, program, args)
    elif program == "make":
        targets = re.findall(r"^([a-z][\w-]*):", (REPO / "Makefile").read_text(), re.MULTILINE)
        assert set(args) <= set(targets), args
    elif program == "pip":
        assert args[:1] == ["install"], args
        for requirement in args[1:]:
            # A published name, or a folder of the checkout (".", "./adapters/rq"), with extras.
            found = re.fullmatch(
                r"(cron-bridge(?:-celery|-rq|-dramatiq)?|\.|\./adapters/\w+)"
                r"(?:\[([\w,-]+)\])?",
                requirement,
            )
            assert found, f"not one of our packages: {requirement}"
            name = found[1]
            if name.startswith("."):
                folder = REPO / name
            else:
                folder = REPO / "adapters" / name[12:] if name != "cron-bridge" else REPO
            project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
            extras = set(found[2].split(",")) if found[2] else set()
            assert extras <= set(project.get("optional-dependencies", {})), requirement
    elif program == "celery":
        if "-S" in args:
            alias = args[args.index("-S") + 1]
            names = {
                e.name for e in importlib.metadata.entry_points(group="celery.beat_schedulers")
            }
            assert alias in names, alias
    elif program == "kubectl":
        check_kubectl(args)
    else:
        assert program in NOT_CHECKED, f"a command nobody checks: {shlex.join(words)}"


def check_kubectl(args: list[str]) -> None:
    """``apply -k`` names a folder; the namespace and the Secret the docs create are the ones
    the manifests use, with the keys their pods read."""
    kustomization = yaml.safe_load((REPO / "deploy/k8s/kustomization.yaml").read_text())
    namespace = kustomization["namespace"]
    if "-k" in args:
        assert (REPO / args[args.index("-k") + 1]).is_dir(), args
    elif args[:2] == ["create", "namespace"]:
        assert args[2] == namespace, args
    elif "secret" in args and "generic" in args:
        assert args[args.index("-n") + 1] == namespace, args
        manifests = "\n".join(p.read_text() for p in (REPO / "deploy/k8s").glob("*.yaml"))
        name = args[args.index("generic") + 1]
        assert f"secretRef: {{name: {name}}}" in manifests, name
        keys = {a.split("=", 2)[1] for a in args if a.startswith("--from-literal=")}
        assert keys == {"CRON_BRIDGE_STORE", "CRON_BRIDGE_SECRET"}, keys
    else:
        raise AssertionError(f"a kubectl command nobody checks: {args}")


@pytest.mark.extras  # rq's commands, and the adapters' commands and schedulers
@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_shell_samples_name_what_exists(page: Path) -> None:
    for sample in (s for s in samples(page) if s.language == "sh"):
        for words in command_lines(sample.code):
            try:
                check_command(words)
            except (AssertionError, click.ClickException) as exc:
                raise AssertionError(f"{sample.where}: {shlex.join(words)}: {exc}") from exc


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_yaml_and_json_samples_parse(page: Path) -> None:
    for sample in samples(page):
        if sample.language == "yaml":
            assert list(yaml.safe_load_all(sample.code)), sample.where
        elif sample.language == "json":
            assert json.loads(sample.code), sample.where


@pytest.mark.extras  # MkDocs
def test_the_site_builds_and_needs_no_network(tmp_path: Path) -> None:
    """``mkdocs build --strict`` is clean, every script, style sheet and image of the built
    site is a file of its own (no CDN: it renders offline), and the API reference is rendered
    from the docstrings."""
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    remote = re.compile(
        r"<(?:script|img|link|iframe)\b[^>]*\b(?:src|href)=\"(?:https?:)?//", re.IGNORECASE
    )
    pages = list(site.rglob("*.html"))
    assert len(pages) > 20
    for page in pages:
        assert not remote.search(page.read_text()), page
    for sheet in site.rglob("*.css"):
        assert not re.search(r"@import\s+url\(\s*['\"]?(?:https?:)?//", sheet.read_text()), sheet
    api = (site / "api" / "index.html").read_text()
    assert "cron_bridge.cluster_task" in api and "Declare a scheduled job" in api
    assert "cron_bridge.JobContext" in api and "raise_if_aborted" in api
