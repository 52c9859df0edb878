"""`python -m xbench.studies`'s answers by option, in this process: --published a line per published figure,
--print report a report command per study, --check-report's refusals of a folder that is not the report asked
for (none there; with --full, not a full report's --out folder), and by default every study's commands."""

from __future__ import annotations

from xbench import studies
from xbench.studies.__main__ import main


def test_published_and_print_report_give_a_line_each(capsys):
    assert main(["tpu_vs_gpu", "--published"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(studies.published_rows("tpu_vs_gpu")) > 1
    assert lines[0].startswith("tpu_vs_gpu/tpu_vs_gpu_synthetic_1024 [ratio]: 1.02 x (TPU images/s over GPU ")
    assert main(["--print", "report"]) == 0
    assert capsys.readouterr().out.splitlines() == [s["report"]["small"] for s in studies.all_studies()]


def test_check_report_refuses_a_folder_that_is_not_the_report_asked_for(tmp_path, capsys):
    assert main(["--check-report", str(tmp_path / "nowhere")]) == 1
    assert capsys.readouterr().err == (f"xbench.studies: --check-report {tmp_path / 'nowhere'}: no such "
                                       "folder (give the report's --out folder)\n")
    assert main(["pod_scaling", "--check-report", str(tmp_path), "--full"]) == 1
    assert capsys.readouterr().err == (f"xbench.studies: --check-report {tmp_path} --full: not the --out "
                                       "folder of a full report with headlines (pod_scaling, "
                                       "pod_scaling_vs_8xv100)\n")


def test_without_options_every_study_says_its_commands(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(s["report"]["small"] in out for s in studies.all_studies())
