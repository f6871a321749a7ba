"""One owner per option: the Fit flags of `envad fit`, `envad scan` and `envad retrain`
are declared once (client/fit_options.py), and no help text writes out a default whose
owner is a constant."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest

from envad import defaults
from envad.client.cli import build_parser
from envad.client.fit_options import (
    FIT_OPTION_HELP,
    FIT_OPTIONS,
    FitSettings,
    fit_keywords,
    fit_settings,
)
from envad.client.retrain import RETRAIN_FIT_OPTIONS
from envad.client.scan_command import SCAN_FIT_OPTIONS
from envad.pipeline import DEFAULT_PIPELINE
from envad.records import MIN_FIT_ROWS

ROOT = Path(__file__).resolve().parents[2]
PAGES = {name: parser for name, parser in
         build_parser()._subparsers._group_actions[0].choices.items()}  # type: ignore[union-attr]
FLAGS = {"--" + dest.replace("_", "-"): dest for dest in FIT_OPTIONS}
OFFERED = {"fit": FIT_OPTIONS, "scan": SCAN_FIT_OPTIONS, "retrain": RETRAIN_FIT_OPTIONS}
#: options that share a Fit flag's name but are another fact: retrain's training seed
OTHER = {("retrain", "--seed")}


def fit_actions(command: str) -> dict[str, argparse.Action]:
    return {a.option_strings[0]: a for a in PAGES[command]._actions
            if a.option_strings and a.option_strings[0] in FLAGS
            and (command, a.option_strings[0]) not in OTHER}


@pytest.mark.parametrize("command", sorted(OFFERED))
def test_each_command_offers_its_fit_flags_with_the_shared_help(command) -> None:
    actions = fit_actions(command)
    assert sorted(FLAGS[flag] for flag in actions) == sorted(OFFERED[command])
    for flag, action in actions.items():
        assert action.dest == FLAGS[flag]
        assert action.help == FIT_OPTION_HELP[action.dest], (command, flag)


def test_the_shared_flags_are_the_same_in_every_command() -> None:
    fit = fit_actions("fit")
    for command in ("scan", "retrain"):
        for flag, action in fit_actions(command).items():
            same = (action.option_strings, action.help, action.type, action.nargs,
                    action.metavar, action.const)
            assert same == (fit[flag].option_strings, fit[flag].help, fit[flag].type,
                            fit[flag].nargs, fit[flag].metavar, fit[flag].const)
    # the one explicit difference: retrain's job spec records the pipeline's choices
    retrain = fit_actions("retrain")
    assert retrain["--space"].default == DEFAULT_PIPELINE.space
    assert retrain["--score-adaptation"].default == DEFAULT_PIPELINE.score_adaptation
    assert fit["--space"].default == fit["--score-adaptation"].default == ""


def client_sources() -> list[Path]:
    return sorted((ROOT / "client").rglob("*.py"))


def declared_options(path: Path) -> list[str]:
    """Option strings of every `add_argument` call in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            found += [a.value for a in node.args
                      if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return found


def test_no_client_module_declares_a_fit_flag_itself() -> None:
    owner = ROOT / "client" / "fit_options.py"
    for path in client_sources():
        if path == owner:
            continue
        again = sorted(set(declared_options(path)) & set(FLAGS) - {"--seed"})
        assert not again, (f"{path.relative_to(ROOT)} declares {again} again: use "
                           "envad.client.fit_options.add_fit_options")


def test_fit_keywords_builds_the_client_arguments_once() -> None:
    args = PAGES["fit"].parse_args(["--detectors", "KNN, PCA", "--no-activate",
                                    "--event-gap", "-1", "--seed", "3"])
    keywords = fit_keywords(args)
    assert fit_settings(args) == FitSettings(**keywords)
    assert keywords["detectors"] == ("KNN", "PCA")
    assert keywords["activate"] is False and keywords["event_gap_s"] == -1.0
    assert keywords["seed"] == 3
    # retrain's --seed is the training seed, not a Fit option: never sent to Fit
    retrain = PAGES["retrain"].parse_args(["--workdir", "w", "--seed", "7"])
    assert set(fit_keywords(retrain)) == {"detectors", "space", "score_adaptation",
                                         "allow_few_rows"}


# ------------------------------------------------------------------ literal defaults

#: defaults with an owner constant, as help text would write them out
OWNED = {
    "DEFAULT_PORT": defaults.DEFAULT_PORT,
    "DEFAULT_TOP_K": defaults.DEFAULT_TOP_K,
    "FIT_MAX_SAMPLES": defaults.FIT_MAX_SAMPLES,
    "DEFAULT_CONTAMINATION": defaults.DEFAULT_CONTAMINATION,
    "DEFAULT_MIN_CAMERA_ROWS": defaults.DEFAULT_MIN_CAMERA_ROWS,
    "DEFAULT_EVENT_GAP_S": defaults.DEFAULT_EVENT_GAP_S,
    "MIN_FIT_ROWS": MIN_FIT_ROWS,
    "MEGADETECTOR_MIN_CONF": defaults.MEGADETECTOR_MIN_CONF,
}
#: a default written out in help text: "(default: 10)", "(default 4;" ("default 0:" is
#: what a flag's sentinel 0 means, not a default owned elsewhere)
WRITTEN_OUT_DEFAULT = re.compile(r"\bdefault:? (?!0:)-?\d")


def spellings(value: float) -> set[str]:
    return {f"{value:g}", f"{value:,g}", f"{value:_g}"}


def literal_help_parts(path: Path) -> list[str]:
    """The literal text (f-string parts included, interpolations left out) of every
    help= and description= argument and of every FIT_OPTION_HELP entry in `path`."""
    parts = []
    for node in ast.walk(ast.parse(path.read_text())):
        texts = []
        if isinstance(node, ast.keyword) and node.arg in ("help", "description"):
            texts = [node.value]
        elif (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
              and node.target.id == "FIT_OPTION_HELP" and isinstance(node.value, ast.Dict)):
            texts = node.value.values
        for text in texts:
            parts += [n.value for n in ast.walk(text)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return parts


@pytest.mark.parametrize("name", sorted(OWNED))
def test_no_help_text_writes_out_an_owned_default(name) -> None:
    pattern = re.compile("|".join(rf"(?<![\w.]){re.escape(s)}(?![\w]|\.\d)"
                                  for s in spellings(OWNED[name])))
    for path in client_sources():
        for part in literal_help_parts(path):
            assert not pattern.search(part), (
                f"{path.relative_to(ROOT)}: help text {part!r} writes out {name}; render "
                "it from the constant")


def test_no_help_text_writes_out_a_number_as_its_default() -> None:
    found = [f"{path.relative_to(ROOT)}: {part!r}" for path in client_sources()
             for part in literal_help_parts(path) if WRITTEN_OUT_DEFAULT.search(part)]
    assert not found, ("help text writing out a default (let the formatter show the "
                       "flag's default, or render it from its owner):\n" + "\n".join(found))


def test_the_literal_default_check_sees_a_written_out_default(tmp_path) -> None:
    source = tmp_path / "bad.py"
    source.write_text('p.add_argument("--top-k", help="neighbours (default: the '
                      'server\'s, 5)")\np.add_argument("--x", help=f"fine {K}")\n')
    parts = literal_help_parts(source)
    assert "neighbours (default: the server's, 5)" in parts
    assert any(re.search(r"(?<![\w.])5(?![\w]|\.\d)", p) for p in parts)
    assert WRITTEN_OUT_DEFAULT.search("images shown per camera (default: 10)")
    assert not WRITTEN_OUT_DEFAULT.search("(default 0: the server's, ")


def test_the_service_name_is_the_protos() -> None:
    from envad.v1 import envad_pb2

    assert (envad_pb2.DESCRIPTOR.services_by_name["AnomalyService"].full_name
            == defaults.SERVICE_NAME)
    assert defaults.DEFAULT_ADDRESS.endswith(f":{defaults.DEFAULT_PORT}")
