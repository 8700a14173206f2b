"""The README's first two commands and what CI runs stay one and the same: the fresh-venv check
(scripts/check_readme_first_command.sh, run by .ci/run) installs and asks exactly what the
README's first command does, and the test command is the one CI runs."""
from __future__ import annotations

import re
import shlex

import pytest
from conftest import REPO

CHECK = REPO / "scripts" / "check_readme_first_command.sh"


def readme_commands() -> list[str]:
    """The indented command lines at the top of the README, before its first rule."""
    top = (REPO / "README.md").read_text(encoding="utf-8").split("\n---\n")[0]
    return [line.strip() for line in top.splitlines() if line.startswith("    ") and line.strip()]


def script_setting(name: str) -> str:
    match = re.search(rf'^{name}="([^"]*)"$', CHECK.read_text(encoding="utf-8"), re.MULTILINE)
    if match is None:
        pytest.fail(f"{CHECK}: no {name}=\"...\" line")
    return match.group(1)


def test_check_script_runs_the_readme_first_command():
    first = readme_commands()[0]
    expected = (f"pip install {script_setting('TORCH_REQUIREMENT')} && pip install -e . && "
                f"convqa answer {shlex.quote(script_setting('QUESTION'))}")
    assert shlex.split(first) == shlex.split(expected)
    assert script_setting("EXPECTED") in "Stanley Kubrick"


def test_check_script_installs_no_extras_and_answers_with_an_empty_home():
    text = CHECK.read_text(encoding="utf-8")
    installs = re.findall(r'"\$venv/bin/pip" install (.+?) >', text)
    assert installs == ['"$TORCH_REQUIREMENT"', '-e "$checkout"']  # no [extras], nothing else
    assert re.search(r'^HOME="\$home" "\$venv/bin/convqa" answer "\$QUESTION" </dev/null',
                     text, re.MULTILINE)


def test_ci_runs_the_readme_test_command_then_the_check():
    assert readme_commands()[1] == "bash scripts/test.sh"
    steps = [line for line in (REPO / ".ci" / "run").read_text().splitlines()
             if line.startswith("bash ")]
    assert steps == ["bash scripts/test.sh", "bash scripts/check_readme_first_command.sh"]
    torch_pin = script_setting("TORCH_REQUIREMENT")
    assert f'"{torch_pin}"' in (REPO / "scripts" / "test.sh").read_text()


def test_answer_does_not_pay_for_the_demo(tmp_path):
    """gradio is a core dependency for `convqa demo`, imported by nothing else."""
    import subprocess
    import sys

    import yaml

    from demo_helpers import FIRST_QUESTION, build_film_config

    config = tmp_path / "films.yaml"
    config.write_text(yaml.safe_dump(build_film_config(tmp_path)), encoding="utf-8")
    code = ("import sys\nfrom convqa.front.cli.main import main\n"
            f"assert main(['answer', {FIRST_QUESTION!r}, '--config', {str(config)!r}]) == 0\n"
            "print(sorted(m for m in ('gradio', 'fastapi', 'uvicorn') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"
