"""The command-line tools report a `ConvQAError` as one line, `PROG: error: ...`, and exit code 2
(convqa.errors.reports_errors), as `convqa` itself does; a bug keeps its traceback."""
from __future__ import annotations

import pytest

from convqa.errors import ConfigError, ConvQAError, DataError, reports_errors


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert captured.out == ""
    return err


def store_lora_int8(tmp_path):
    from convqa.front.tools.store_lora_int8 import main

    missing = tmp_path / "no-model"
    return main, [str(missing), str(tmp_path / "out")], "store_lora_int8", missing


def device_pack(tmp_path):
    from convqa.front.tools.device_pack.__main__ import main

    missing = tmp_path / "no-examples.jsonl"
    return main, ["examples-pack", str(tmp_path / "out.json.xz"), str(missing)], "device_pack", \
        missing


def export_prebuilt_index(tmp_path):  # returned 1 before the decorator
    from convqa.front.tools.export_prebuilt_index import main

    missing = tmp_path / "no-index"
    return main, ["--index", str(missing), "--out", str(tmp_path / "out")], \
        "export_prebuilt_index", missing


@pytest.mark.parametrize("tool", [store_lora_int8, device_pack, export_prebuilt_index])
def test_a_missing_path_is_one_line_and_exit_code_2(tmp_path, capsys, tool):
    main, argv, prog, missing = tool(tmp_path)
    capsys.readouterr()
    assert main(argv) == 2
    err = one_error_line(capsys)
    assert err.startswith(f"{prog}: error: ") and str(missing) in err, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.json.xz").exists()


def test_reports_errors_turns_a_convqa_error_into_one_line(capsys):
    @reports_errors("tool")
    def main(argv: list[str] | None = None) -> int:
        """The tool's doc."""
        if argv == ["config"]:
            raise ConfigError("--flag: expected a number")
        if argv == ["data"]:
            raise DataError("malformed JSON", "in.jsonl", line=3)
        if argv == ["base"]:
            raise ConvQAError("plain")
        print("done")
        return 0 if argv is None else len(argv)

    assert main.__name__ == "main" and main.__doc__ == "The tool's doc."
    assert main() == 0 and capsys.readouterr().out == "done\n"
    assert main(argv=["a", "b", "c"]) == 3  # a success keeps its own return value
    capsys.readouterr()
    for argv, line in ((["config"], "tool: error: --flag: expected a number"),
                       (["data"], "tool: error: in.jsonl:3: malformed JSON"),
                       (["base"], "tool: error: plain")):
        assert main(argv) == 2
        assert one_error_line(capsys) == line


def test_reports_errors_lets_a_bug_propagate(capsys):
    @reports_errors("tool")
    def main(argv: list[str] | None = None) -> int:
        raise KeyError("a bug")

    with pytest.raises(KeyError, match="a bug"):
        main([])
    assert capsys.readouterr().err == ""


def test_reports_errors_leaves_argparse_exits_alone():
    import argparse

    @reports_errors("tool")
    def main(argv: list[str] | None = None) -> int:
        parser = argparse.ArgumentParser(prog="tool")
        parser.add_argument("--n", type=int, required=True)
        return parser.parse_args(argv).n

    assert main(["--n", "4"]) == 4
    with pytest.raises(SystemExit) as exit_:
        main([])
    assert exit_.value.code == 2
