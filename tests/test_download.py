"""lib/download.py, offline: the evaluation data folder itself serves as the mirror (file:// URLs); USEB's zips are
stand-ins made here."""
import shutil
import zipfile
from pathlib import Path

import pytest

from lib import cli, download, taskfiles
import evaluate

CORPUS = "askubuntu/text_tokenized.txt.gz"  # not in the shared data folder (its checksum is unknown)


def test_fetch_from_mirror_gives_the_same_bytes_and_a_second_call_downloads_nothing(data_dir, tmp_path, capsys,
                                                                                       monkeypatch):
    askubuntu = [f for f in download.SETS["askubuntu"] if f.dest != CORPUS]  # the mirror lacks the corpus
    monkeypatch.setitem(download.SETS, "askubuntu", askubuntu)
    expected = [f.dest for name in download.DEFAULT_SETS for f in download.SETS[name]]
    assert download.DEFAULT_SETS == [name for name in download.SETS if name != "useb"]  # USEB only when named
    assert download.fetch(tmp_path, mirror=data_dir.as_uri()) == expected  # every default set, in table order
    for rel in expected:
        assert (tmp_path / rel).read_bytes() == (data_dir / rel).read_bytes(), rel
    assert not list(tmp_path.rglob("*.part"))

    capsys.readouterr()
    assert download.fetch(tmp_path, mirror=data_dir.as_uri()) == []
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == f"{len(expected)} files in {tmp_path} (0 downloaded, {len(expected)} already there)"

    for task in ["stsb", "stsb-dev", "sickr", "sts12", "sts13", "sts14", "sts15", "sts16", "twitterpara"]:
        assert taskfiles.missing_file(task, tmp_path) is None, task
    # what the training scripts and tests read as well
    for rel in ["nli/snli_dev.jsonl", "nli/mnli_dev_matched.jsonl", "sick/SICK.txt", "sick/SICK_train.txt",
                "stsbenchmark/senteval/sts-train.csv", "twitterpara/test.label", "askubuntu/dev.txt",
                "askubuntu/test.txt"]:
        assert (tmp_path / rel).is_file(), rel
    # the ablations' corpora (TSDAE's: SNLI dev and MNLI dev matched) rebuilt from what was fetched alone, to the byte
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "examples"))
    import ablations

    fresh = ablations.prepare_corpora(tmp_path, tmp_path / "fresh_corpora")
    for method, path in ablations.prepare_corpora(data_dir, tmp_path / "corpora").items():
        assert fresh[method].read_bytes() == path.read_bytes(), method
    assert "The new rights are nice enough" in fresh["tsdae"].read_text(encoding="utf-8").splitlines()  # MNLI's first


def test_every_checksum_in_the_table_is_the_one_in_sha256sums(data_dir):
    sums = {}
    for line in (data_dir / "SHA256SUMS").read_text().splitlines():
        digest, rel = line.split("  ", 1)
        sums[rel] = digest
    files = [f for name in download.DEFAULT_SETS for f in download.SETS[name]]
    assert [f.dest for f in files if f.sha256 is None] == [CORPUS]
    useb = download.SETS["useb"]  # the authors' two zips, as useb/downloading.py fetches them; sums unknown
    assert [(f.dest, f.unpack, f.sha256) for f in useb] == [("useb/data-eval.zip", "data-eval", None),
                                                            ("useb/data-train.zip", "data-train", None)]
    assert [f.url for f in useb] == [f"https://public.ukp.informatik.tu-darmstadt.de/kwang/unsupse-benchmark/"
                                     f"tsdae-evaluation/{name}.zip" for name in ("data-eval", "data-train")]
    for f in files:
        if f.sha256 is not None:
            assert sums.get(f.dest) == f.sha256, f.dest
        assert f.url.startswith("https://raw.githubusercontent.com/"), f.url
    assert len({f.dest for f in files}) == len(files)


def test_a_corrupt_file_is_refused_and_nothing_is_left_behind(data_dir, tmp_path):
    mirror = tmp_path / "mirror"
    for f in download.SETS["sts13"]:
        (mirror / f.dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data_dir / f.dest, mirror / f.dest)
    bad = mirror / "sts13" / "STS.gs.OnWN.txt"
    bad.write_bytes(bad.read_bytes().replace(b"4", b"5", 1))

    out = tmp_path / "out"
    with pytest.raises(download.DownloadError, match=r"checksum mismatch for .*sts13/STS.gs.OnWN.txt") as e:
        download.fetch(out, ["sts13"], mirror=mirror.as_uri())
    assert "\n" not in str(e.value) and "expected sha256 0cd497aa" in str(e.value)
    assert not (out / "sts13" / "STS.gs.OnWN.txt").exists()
    assert [p.name for p in (out / "sts13").iterdir() if p.name.startswith(".")] == []  # no temporary file

    # a good file already there is kept; a wrong one already there is replaced
    (out / "sts13" / "STS.gs.FNWN.txt").write_text("not the gold scores\n")
    shutil.copyfile(data_dir / "sts13" / "STS.gs.OnWN.txt", bad)
    got = download.fetch(out, ["sts13"], mirror=mirror.as_uri())
    assert "sts13/STS.gs.FNWN.txt" in got and "sts13/STS.input.FNWN.txt" not in got
    assert (out / "sts13" / "STS.gs.FNWN.txt").read_bytes() == (data_dir / "sts13" / "STS.gs.FNWN.txt").read_bytes()


def test_the_command_line_fetches_from_a_mirror_and_a_bad_file_is_one_line(data_dir, tmp_path, capsys):
    """python evaluate.py --fetch-data OUT --sets sts13 --mirror URL reads every file from the mirror, not from the
    sources (this machine has no network); a corrupt file there stops it with one line (cli.run's "error: ...")."""
    mirror = tmp_path / "mirror"
    shutil.copytree(data_dir / "sts13", mirror / "sts13")
    out = tmp_path / "out"
    argv = ["--fetch-data", str(out), "--sets", "sts13", "--mirror", mirror.as_uri()]
    assert evaluate.main(argv) == 0
    for f in download.SETS["sts13"]:
        assert (out / f.dest).read_bytes() == (data_dir / f.dest).read_bytes(), f.dest
    assert capsys.readouterr().out.splitlines()[-1].endswith(f"({len(download.SETS['sts13'])} downloaded, 0 already "
                                                             "there)")
    bad = mirror / "sts13" / "STS.gs.OnWN.txt"
    bad.write_bytes(bad.read_bytes().replace(b"4", b"5", 1))
    with pytest.raises(SystemExit) as exit_info:
        cli.run(lambda: evaluate.main([*argv[:1], str(tmp_path / "again"), *argv[2:]]))
    assert str(exit_info.value.code).startswith("error: checksum mismatch for ") and "\n" not in exit_info.value.code


def test_a_missing_file_is_one_line_naming_the_url(data_dir, tmp_path):
    mirror = tmp_path / "empty_mirror"
    mirror.mkdir()
    with pytest.raises(download.DownloadError) as e:
        download.fetch(tmp_path / "out", ["nli"], mirror=mirror.as_uri())
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"could not download {mirror.as_uri()}/nli/snli_dev.jsonl (")
    assert "docs/evaluation.md" in message and "by hand" in message
    out = tmp_path / "out"
    assert [p.relative_to(out) for p in out.rglob("*")] == [Path("nli")]  # an empty folder, no (temporary) file


def test_an_unknown_set_is_refused(tmp_path):
    with pytest.raises(download.DownloadError, match="unknown data set sts17; choose from stsbenchmark, sick"):
        download.fetch(tmp_path, ["sts12", "sts17"])
    assert not list(tmp_path.iterdir())


def test_a_file_without_known_checksum_is_kept_and_its_sum_printed(data_dir, tmp_path, capsys):
    mirror = tmp_path / "mirror"
    (mirror / "askubuntu").mkdir(parents=True)
    for name in ["dev.txt", "test.txt"]:
        shutil.copyfile(data_dir / "askubuntu" / name, mirror / "askubuntu" / name)
    (mirror / CORPUS).write_bytes(b"stand-in corpus")
    out = tmp_path / "out"
    assert download.fetch(out, ["askubuntu"], mirror=mirror.as_uri()) == ["askubuntu/dev.txt", "askubuntu/test.txt",
                                                                          CORPUS]
    assert (out / CORPUS).read_bytes() == b"stand-in corpus"
    assert f"sha256 {download.sha256_of(out / CORPUS)}, not checked" in capsys.readouterr().out
    assert download.fetch(out, ["askubuntu"], mirror=mirror.as_uri()) == []
    assert taskfiles.missing_file("askubuntu", out) is None


# ---------------------------------------------------------------------------
# USEB's zips: downloaded to a temporary file, unpacked beside the target, renamed into place
# ---------------------------------------------------------------------------

def make_zip(path: Path, entries: dict[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in entries.items():
            archive.writestr(zipfile.ZipInfo(name), text)
    return path


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.name.startswith("."))


def test_useb_zips_unpack_into_data_useb_and_a_second_call_downloads_nothing(tmp_path, capsys):
    mirror = tmp_path / "mirror"
    make_zip(mirror / "useb" / "data-eval.zip", {"data-eval/askubuntu/dev.txt": "1\t2\t2 3\t1 0\n",
                                                 "data-eval/scidocs/data.json": "{}", "tree.txt": "not kept"})
    make_zip(mirror / "useb" / "data-train.zip", {"data-train/twitter/unsupervised/train.txt": "a tweet\n"})
    out = tmp_path / "data"
    assert download.fetch(out, ["useb"], mirror=mirror.as_uri()) == ["useb/data-eval", "useb/data-train"]
    assert (out / "useb" / "data-eval" / "askubuntu" / "dev.txt").read_text() == "1\t2\t2 3\t1 0\n"
    assert (out / "useb" / "data-train" / "twitter" / "unsupervised" / "train.txt").read_text() == "a tweet\n"
    assert sorted(p.name for p in (out / "useb").iterdir()) == ["data-eval", "data-train"]  # no zip, no temporary
    printed = capsys.readouterr().out
    digest = download.sha256_of(mirror / "useb" / "data-eval.zip")
    assert f"useb/data-eval.zip: downloaded (sha256 {digest}, not checked: no known checksum), unpacked into " \
           f"useb/data-eval/" in printed
    assert download.fetch(out, ["useb"], mirror=mirror.as_uri()) == []
    assert "already there (useb/data-eval/)" in capsys.readouterr().out


@pytest.mark.parametrize("entries, message", [
    ({"data-eval/ok.txt": "x", "../escaped.txt": "x"}, r"entry '\.\./escaped\.txt' would be written outside"),
    ({"data-eval/ok.txt": "x", "/tmp/absolute.txt": "x"}, r"entry '/tmp/absolute\.txt' would be written outside"),
    ({"data-eval/../../escaped.txt": "x"}, r"would be written outside"),
    ({"other/ok.txt": "x"}, r"holds no folder data-eval/ at its top"),
])
def test_a_bad_zip_is_refused_and_nothing_is_left(tmp_path, entries, message):
    mirror = tmp_path / "mirror"
    make_zip(mirror / "useb" / "data-eval.zip", entries)
    out = tmp_path / "data"
    with pytest.raises(download.DownloadError, match=message) as e:
        download.fetch(out, ["useb"], mirror=mirror.as_uri())
    assert "\n" not in str(e.value)
    assert list((out / "useb").iterdir()) == [] and not (tmp_path / "escaped.txt").exists()


def test_a_corrupt_or_missing_zip_is_one_line_and_nothing_is_left(tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "useb").mkdir(parents=True)
    (mirror / "useb" / "data-eval.zip").write_bytes(b"PK\x03\x04 not really a zip")
    out = tmp_path / "data"
    with pytest.raises(download.DownloadError, match=r"could not unpack .*data-eval\.zip .*nothing was kept"):
        download.fetch(out, ["useb"], mirror=mirror.as_uri())
    (mirror / "useb" / "data-eval.zip").unlink()
    with pytest.raises(download.DownloadError, match=r"could not download .*data-eval\.zip"):
        download.fetch(out, ["useb"], mirror=mirror.as_uri())
    assert list((out / "useb").iterdir()) == [] and leftovers(out) == []
