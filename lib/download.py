"""Download the public evaluation data into the folder layout evaluate.py reads (docs/evaluation.md lists it).

    python evaluate.py --fetch-data data/              # every default set; see --help for --sets and --mirror
    python evaluate.py --fetch-data data/ --sets useb  # USEB's data-eval and data-train, into data/useb/

Every file comes from a public GitHub repository at a pinned commit, so its bytes never change and its
SHA256 is written below: a file is only put in place once its checksum matches. The original servers
(SentEval's sources, USEB's zip) serve zips and tarballs that need unpacking and, for STS, a Moses
tokenizer; the pinned copies are those files already unpacked (and tokenized), one plain file each.
The one exception is the set `useb` (not among the default sets: several hundred MB): USEB's own two zips,
data-eval.zip and data-train.zip, from the authors' server, unpacked into useb/data-eval/ and useb/data-train/.

From Python: `download.fetch(Path("data"), ["sts12", "sick"], mirror=None)`. `mirror` is a base URL
(e.g. file:///copy/of/data) under which each file is looked up by its place in the layout instead.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from lib.errors import UsageError


class DownloadError(UsageError):
    """A file could not be fetched, or its checksum is wrong, or a set name is unknown (one-line message)."""


class Remote(NamedTuple):
    dest: str  # where it goes, relative to the data folder (a zip: where a --mirror serves it)
    url: str
    sha256: str | None  # None: not known in advance; the computed sum is printed instead
    unpack: str | None = None  # a zip: the folder at its top, which goes beside `dest` (the zip is not kept)


def _github(repo_at_commit: str, src_dir: str, dest_dir: str, sums: dict[str, str | None]) -> list[Remote]:
    """The files named in `sums`, kept under their names: src_dir/NAME of the repository -> dest_dir/NAME."""
    base = f"https://raw.githubusercontent.com/{repo_at_commit}/{src_dir}".rstrip("/")
    return [Remote(f"{dest_dir}/{name}", f"{base}/{name}", sha) for name, sha in sums.items()]


# ---------------------------------------------------------------------------
# What to fetch, per data set
# ---------------------------------------------------------------------------

# STS12-16 and the STS benchmark. SentEval's data/downstream/get_transfer_data.bash (facebookresearch/SentEval)
# downloads http://ixa2.si.ehu.es/stswiki/images/4/40/STS2012-en-test.zip, .../2/2f/STS2013-en-test.zip,
# .../8/8c/STS2014-en-test.zip, .../d/da/STS2015-en-test.zip, .../9/98/STS2016-en-test.zip and
# http://ixa2.si.ehu.es/stswiki/images/4/48/Stsbenchmark.tar.gz, unpacks them into STS/STSNN-en-test and
# STS/STSBenchmark, and rewrites the sentence columns Moses-tokenized and lowercased. amao0o0/SynWMD committed
# that folder as the script left it: STS.input/STS.gs and STSBenchmark/sts-*.csv are the script's OUTPUT
# (what SentEval, SimCSE and ConSERT read), and the unpacked release sits beside it in subfolders
# (stsbenchmark/, test-gold/, ...), from which come the untokenized STS benchmark and the readme/licence files.
SYNWMD = "amao0o0/SynWMD/4ad176952dd17f66c96a206d9fdbb6ff52658380"
STS = "data/downstream/STS"

# SICK: SentEval fetches http://alt.qcri.org/semeval2014/task1/data/uploads/sick_{train,trial,test_annotated}.zip
# and then Moses-tokenizes them; evaluate.py reads the UNtokenized release files, which brmson/dataset-sts
# holds as unpacked from those zips, with their readme.txt (CC BY-NC-SA 3.0). SICK.txt is the full release
# (9840 pairs, with entailment labels), as kkalouli/SICK-processing holds it.
BRMSON = "brmson/dataset-sts/e1d3375f5b3bc24f21aa4e46f96eb379e9fc1081"
KKALOULI = "kkalouli/SICK-processing/b55cf253c6ae9f5b5c9b287184e34147a5d7fc67"

# TwitterPara as USEB (UKPLab/useb) evaluates it: useb/downloading.py fetches one zip,
# https://public.ukp.informatik.tu-darmstadt.de/kwang/unsupse-benchmark/tsdae-evaluation/data-eval.zip, whose
# twitterpara/ holds these three files (not opened here: not compared byte for byte). They come from the authors:
# the Twitter URL corpus test set (lanwuwei/Twitter-URL-Corpus, deleted from the repository after this commit)
# and the PIT-2015 test set (cocoxu/SemEval-PIT2015 ships test.data only inside a zip; the task organiser's
# older repository cocoxu/twitterparaphrase has it as a plain file, and the same test.label as SemEval-PIT2015).
TWITTER_URL = "lanwuwei/Twitter-URL-Corpus/ea41a9cd3710c774d6ebf969c7c7788227488761"
PIT2015 = "cocoxu/twitterparaphrase/4039beb7ce9505bdf84676a2b7595b484d203750"

# AskUbuntu: the authors' repository taolei87/askubuntu (Lei et al. 2016), which USEB's data-eval.zip also
# repackages (askubuntu/ with the corpus un-gzipped). The checksum of text_tokenized.txt.gz is not known here
# (no copy of its bytes was reachable); its git blob id at this commit is 64b7ce412dfe509ca1f2a52c950182246fccdc47,
# which `git hash-object text_tokenized.txt.gz` prints for the right file.
ASKUBUNTU = "taolei87/askubuntu/4d0a9169ef0bfa4c93ff1aa9f25bc426a7fa559e"

# SNLI dev and MultiNLI dev matched (untokenized JSON lines, "-" pairs dropped) from anthonywchen/generative-nli,
# made by its data/process_raw_data.py from the official https://nlp.stanford.edu/projects/snli/snli_1.0.zip (the
# SNLI URL of SentEval's script; CC BY-SA 4.0) and multinli_1.0_dev_matched.jsonl (MultiNLI 1.0: OANC's terms, its
# fiction CC BY-SA / CC BY 3.0). The TSDAE ablations' corpus (examples/ablations.py) is the sentences of both.
GENERATIVE_NLI = "anthonywchen/generative-nli/5780c5aff1b0038182ca8fe10dcd910614a39037"

USEB_SERVER = "https://public.ukp.informatik.tu-darmstadt.de/kwang/unsupse-benchmark/tsdae-evaluation"

SETS: dict[str, list[Remote]] = {
    "stsbenchmark": _github(SYNWMD, f"{STS}/STSBenchmark/stsbenchmark", "stsbenchmark", {
        "sts-train.csv": "0f71910b59aa1ad973c5897f0791f3b0965a92b8f82b1a95f3eea9f4162fda82",
        "sts-dev.csv": "5d7e944d8b02734b07bfdb5df67db3420c64bed153fcaa1ba47ad03480cf4234",
        "sts-test.csv": "affe45928a66ee5a708531233c95b7dacbbdc57f974f002a3d32ea0180cf816a",
        "readme.txt": "e9488363d211c32ca5e912954f16eb9233cfed1b5b4b0475d0d812d35d7c8ef1",
        "LICENSE.txt": "3dfc3217395f8c5dd05c5f8995f25fe2f8fd258e6dd770b3de480749caee8c70",
    }) + _github(SYNWMD, f"{STS}/STSBenchmark", "stsbenchmark/senteval", {
        "sts-train.csv": "6466868d4b49a575530554224fe2e7d8cc03e83e1f326c90e561b81bf5031fec",
        "sts-dev.csv": "fd3e4e429f32e352c7c7c76aea5c3383ee95eb98e482796b34e4e7b88a8392f3",
        "sts-test.csv": "4cde2a19c9b7232c9ce92a89e5afd99805c8f66ba432a7824e0a5bad1a0a0ea0",
    }),
    "sick": _github(BRMSON, "data/sts/sick2014", "sick", {
        "SICK_train.txt": "266cf8047149bd1d68138dd30439f3122bff30069740ac6705bb6197d9f1b48e",
        "SICK_trial.txt": "5a88cfb62f8c6bd2a3cce0f2421ba2cb8c2be5ab4a800f6f01e2c64aafb7db56",
        "SICK_test_annotated.txt": "2b8aa806658d6fc23c6824c83776c2d4fee7556000817b5ec0f982861413b7d0",
        "readme.txt": "4ff14a2b07603f2214c2803a6e012048c795be5ba4e5d1d33b87d7210f633bf7",
    }) + _github(KKALOULI, "", "sick", {
        "SICK.txt": "1539c2d059809b5bd40694e26d8121cc85b6b496f91c7b40f2fc83bbd7dcd957",
    }),
    # STS.input.<subset>.txt / STS.gs.<subset>.txt per subset; original/ gets the release's readme or licence.
    "sts12": _github(SYNWMD, f"{STS}/STS12-en-test", "sts12", {
        "STS.input.MSRpar.txt": "093b36d9cc1cd26364885c0f5d5be7ed024f475bceb552384f7fd489174b3c4f",
        "STS.gs.MSRpar.txt": "5526be59228bc34ccb3cb6f1f56c0d7278d3419b8886713ae016fd92b151f19c",
        "STS.input.MSRvid.txt": "5a007f6882ed3398afdbb0d1ed093457c4adbac82a5b411ea356e0985650c39f",
        "STS.gs.MSRvid.txt": "9c6096c6bcfb0144c8bbddb00900ca9198c88498630cd0c8f08d18365f1d7150",
        "STS.input.SMTeuroparl.txt": "971d76409ebd10a2285a846a20fd035e4e4ba2f85054e2869f5b41bb3182ca82",
        "STS.gs.SMTeuroparl.txt": "708530c4d006d06881f3289fce35d624d7efe562dcf0fe5f8aa0eec3a135f6d4",
        "STS.input.surprise.OnWN.txt": "1059c1b66fc72071881175754d3a01158e423ec6b032e1dd87b18fc7ecb1e8d9",
        "STS.gs.surprise.OnWN.txt": "088d8ca22c0aa406e4a5d2e6e308a4f38b482b8e736c2445a38ffb6e4c4fb4fd",
        "STS.input.surprise.SMTnews.txt": "048cbedbba58a136722e9d102f0416326aa04644180e031318c28caf90258585",
        "STS.gs.surprise.SMTnews.txt": "aa6dfc868db333c43dc59be14d46fa6587c7ebddc0d497e717f647bf35121cf1",
    }) + _github(SYNWMD, f"{STS}/STS12-en-test/test-gold", "sts12/original", {  # MSR licence terms
        "00-readme.txt": "d47be1641ac98ac312de6f0746b65683df392f70d843eaac9fb10ebd4cb4cb63",
    }),
    "sts13": _github(SYNWMD, f"{STS}/STS13-en-test", "sts13", {
        "STS.input.FNWN.txt": "7bcc0fc86d30c8980c9ac9735c612492abd236524bec32bed98070e225b2e023",
        "STS.gs.FNWN.txt": "8ca95b7228119578e2007839cf7969f22c4f1fd41fd610c4b7f9683072d98066",
        "STS.input.headlines.txt": "e60c724b4b620802f42d7696f27e6a8153205a716b142f0a051e2b2b2e99e505",
        "STS.gs.headlines.txt": "f49f64089011436dd296ef384c07160219406feef7dc4b9fa2af52a519f32bc6",
        "STS.input.OnWN.txt": "3c616d878f3d7bfbadce1657bcc5a78d7d429fd10fc2e31195d314543fecab1a",
        "STS.gs.OnWN.txt": "0cd497aaddb00a2fb6db25f77bccfc09e8aa012e11549b81b434bab1a27ad954",
    }) + _github(SYNWMD, f"{STS}/STS13-en-test/test-gs", "sts13/original", {
        "00-readme.txt": "531ee28a3787b11dd14dda8d809e724479d87f9705120494aad584c9cb14a6ce",
    }),
    "sts14": _github(SYNWMD, f"{STS}/STS14-en-test", "sts14", {
        "STS.input.deft-forum.txt": "7d52c9b130cf0d0291b2f2ea5324363219267ffcecf0a56f4306503adb231714",
        "STS.gs.deft-forum.txt": "ba6dc76696b5c93985590a325b4d142449932cdf0d715b2bab1b1743fe3c488c",
        "STS.input.deft-news.txt": "2416e9f1a13136ac213cbfd413d98cd8504edcca21c87deef3aa5c1207bc1448",
        "STS.gs.deft-news.txt": "105c5b333abd50c274efb4dae9e3e0dab36ed63eee780cfb49955b1586bd62f2",
        "STS.input.headlines.txt": "08e808b7786ec7b830badf9843c55fc7930467ae75e2cd6fe8fd518496b66730",
        "STS.gs.headlines.txt": "f243c34647255cd0b994565ed4f58dd31506e7d9c9d6250d1a6dd14095625832",
        "STS.input.images.txt": "3d44abc6af8d8b1c69b6e93bb386176d5896985dba91a13e5587350e92a90c83",
        "STS.gs.images.txt": "fc994ebacc7074c332626fa9e29542d7340a48a3cdb999b47cdb59c378523a62",
        "STS.input.OnWN.txt": "52f462f085f6920f70115761c50924f16a4fd6caec2cfccec82311619c1be326",
        "STS.gs.OnWN.txt": "1c80147df270ea4cfce14a47ed29f8a2f10d5dc016d02836077fd786ff7f535b",
        "STS.input.tweet-news.txt": "6b0173393868ea87f315f32971bff68b328e466678f481d4710d8488e7cc90de",
        "STS.gs.tweet-news.txt": "0098c644bfeaa2d511a8297b1940771865900c372c9dd49a62726dc5ec02c9a3",
    }) + _github(SYNWMD, f"{STS}/STS14-en-test/sts-en-test-gs-2014", "sts14/original", {
        "00-readme.txt": "9fe9d64362ac42ed24010d5b00f227235a660dc2466fba743f31051fd121ef73",
    }),
    "sts15": _github(SYNWMD, f"{STS}/STS15-en-test", "sts15", {
        "STS.input.answers-forums.txt": "65e3f55333c53897c6791ff154a490857a827d4699bc2d1f18e53693dbfd0c39",
        "STS.gs.answers-forums.txt": "1644301a7540e5484da285002e9269062852efb2272be614cad99c9530f6a102",
        "STS.input.answers-students.txt": "4893f736e84cea176c39c882250f6513d5bbcfa6ebe8d3ffabcef6056d0471a7",
        "STS.gs.answers-students.txt": "028db213140f8c7aef7497c4ae38b6380938f20359852231669c83dce11c3701",
        "STS.input.belief.txt": "ce09c4713480fd622afbc362d22dd7ffb4e5fc6ee676602368af6f63f9ea7cb5",
        "STS.gs.belief.txt": "5736192faaccbdbecd0ef6b73ec04b24115cd2e48d55dc3b1b170da3d2a81c75",
        "STS.input.headlines.txt": "91f2a6152c574e17544c5e8a856338fa8632898b44c10d2cc9c9516ddfe682c5",
        "STS.gs.headlines.txt": "e8e432f769c8a94ddb62ae3343890ac24a9dd78a116d56c707313bc59413dd56",
        "STS.input.images.txt": "98b2f560e4a3e13253f10b7fd8855006dd327ab272559ab690f2c4e1e5aebca7",
        "STS.gs.images.txt": "ed8878209098c77ca7f02ac413d3fd698f92ad3425999555e50fda89fc46012a",
    }) + _github(SYNWMD, f"{STS}/STS15-en-test/test_evaluation_task2a", "sts15/original", {
        "00-readme.txt": "38fe35ef21a0f224b6cc51e00d138810063521cd90458a7d77e4e0aa3a79542d",
        # Stack Exchange CC BY-SA 3.0 terms for answers-forums. The attribution TSVs it asks for are only
        # inside the release's STS.answers-forums.zip (same folder), which is not fetched.
        "STS.input.answers-forums.LICENSE": "65718ec23624d97933308adc08cb270db798cdd5593d35501be9bfda5ba1a28a",
    }),
    "sts16": _github(SYNWMD, f"{STS}/STS16-en-test", "sts16", {
        "STS.input.answer-answer.txt": "92e66262159e39cb623690e243179f447fb08d493ccec6e600a021b76dd6fe9a",
        "STS.gs.answer-answer.txt": "332efd741b0cb247d20dd2a6cec854360c921c7e6b395f328f562d8d26057214",
        "STS.input.headlines.txt": "f439e10cf28d9cb4dc7642a072f6ac9ac48922f147241af8fe5df3048f24804b",
        "STS.gs.headlines.txt": "01e33a95996201a6e81e3cce9eda0f15048b77613ea64dce2929bb35479f7d85",
        "STS.input.plagiarism.txt": "78f5fb0756400485676f82a47703dab0402ba273a887a6d846e9790ff9300f87",
        "STS.gs.plagiarism.txt": "29984944a91aaff484f2b2e5d4d434fc8a6f5ef6f578a880cccd2786f5142fdc",
        "STS.input.postediting.txt": "cb8e2337a17ecc60a4fb57ecb17c692e13257802d24c9bd401b4bfa574510463",
        "STS.gs.postediting.txt": "81947ed9dbe7f85b7bd249df68ed5c7b2f16f06390ad568eb5554b1e26bc5577",
        "STS.input.question-question.txt": "0b8d495236ea8c9e9eddf529b40d8570e4b38ef29a40d194d5487613b064a4bc",
        "STS.gs.question-question.txt": "cf9ebf9d140191f73620cda0560947ad9283c910735d0d541b8a401a5e64afb0",
    }) + _github(SYNWMD, f"{STS}/STS16-en-test/sts2016-english-with-gs-v1.0", "sts16/original", {
        "README.txt": "1b74b4c84a59f139153f0348e212bfdb33dffd3b008dfb2c4f7728c4fa27141f",
        "LICENSE.txt": "94b7380d16f832ae97bcb48536f22fe9a22e8e20f8cf88a9298f65c556e3a6f2",
    }),
    "twitterpara": _github(TWITTER_URL, "", "twitterpara", {
        "Twitter_URL_Corpus_test.txt": "c5a751420ee34a7f4bb503a913ce5a56768c58da8f0ced843a1a40f3b82fcfd9",
    }) + _github(PIT2015, "SemEval-PIT2015/data", "twitterpara", {
        "test.data": "2a234da3d86a97e69b6afe7e480f772093f54bc83b11affdba618b9c19cfc1e3",
        "test.label": "8815cb24e7d76ca319647b7c218a5040c68ffba1979f0dfcb11f96fd2ab74b08",
    }),
    "askubuntu": _github(ASKUBUNTU, "", "askubuntu", {
        "dev.txt": "5c478af0db8998fd9517788c18f84bca96d0f79141cf80504544635f2c3437e0",
        "test.txt": "5d659c24836bd8ad0a486d353386f1ca3780191e2df6abd58accbfcbb726c4ad",
        "text_tokenized.txt.gz": None,  # the question corpus (titles and bodies), see above
    }),
    "nli": [Remote("nli/snli_dev.jsonl", f"https://raw.githubusercontent.com/{GENERATIVE_NLI}/data/snli/dev.jsonl",
                   "4610d85664b3fa453c33fbbbc006ac870aaa1435ad1583b944af027673f5c3d4"),
            Remote("nli/mnli_dev_matched.jsonl", f"https://raw.githubusercontent.com/{GENERATIVE_NLI}/data/mnli/dev.jsonl",
                   "081af9b80f4fe75aba97d034c0ff21a8017c4d18e3b5b2b0b7612ab2cc3c7bf2")],
    # USEB (UKPLab/useb, the TSDAE paper's benchmark): the two zips its useb/downloading.py fetches, each holding
    # one folder, data-eval/ (what evaluate.py's useb-* tasks read) and data-train/ (<domain>/unsupervised/train.txt
    # and the supervised pairs). Their checksums are not known here (the server could not be reached).
    "useb": [Remote(f"useb/{name}.zip", f"{USEB_SERVER}/{name}.zip", None, unpack=name)
             for name in ("data-eval", "data-train")],
}
DEFAULT_SETS = [name for name in SETS if name != "useb"]  # `fetch` without sets: all but USEB's large zips

HINT = "docs/evaluation.md lists the sources; you can also copy the file there by hand"


# ---------------------------------------------------------------------------
# Fetching
# ---------------------------------------------------------------------------

def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_into(url: str, fd: int, dest: Path, sha256: str | None) -> str:
    """Write the bytes at `url` into the open file descriptor `fd` (closed after) and check them; returns their
    SHA256. `dest` is named in the one-line DownloadError."""
    digest = hashlib.sha256()
    with os.fdopen(fd, "wb") as out:
        try:
            with urllib.request.urlopen(url, timeout=60) as response:  # also reads file:// URLs
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
        except (urllib.error.URLError, OSError, ValueError) as e:  # HTTPError and timeouts included
            reason = e if isinstance(e, urllib.error.HTTPError) else getattr(e, "reason", e)
            raise DownloadError(f"could not download {url} ({reason}) for {dest}; {HINT}") from None
    got = digest.hexdigest()
    if sha256 is not None and got != sha256:
        raise DownloadError(f"checksum mismatch for {dest} from {url}: expected sha256 {sha256}, "
                            f"got {got}; the file was not kept")
    return got


def download(url: str, dest: Path, sha256: str | None) -> str:
    """Fetch `url` into a temporary file next to `dest`, check it, then rename it onto `dest` (atomic: a failed
    or corrupt download leaves neither a partial file nor a temporary one). Returns the file's SHA256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    try:
        got = fetch_into(url, fd, dest, sha256)
        os.chmod(tmp, 0o644)  # mkstemp makes it private to the user; a data file is readable like any other
        os.replace(tmp, dest)
        return got
    finally:
        Path(tmp).unlink(missing_ok=True)  # gone already after a successful rename


def safe_member(name: str) -> bool:
    """A zip entry that stays inside the folder it is extracted into: relative, no '..', no drive letter."""
    path = PurePosixPath(name.replace("\\", "/"))
    return not path.is_absolute() and ".." not in path.parts and ":" not in name


def download_zip(url: str, folder: Path, sha256: str | None) -> str:
    """Fetch the zip at `url` into a temporary file, check it, extract it into a temporary folder beside
    `folder`, then rename the folder of that name at the zip's top onto `folder` (atomic: after a failure
    neither `folder` nor anything temporary is left). Returns the zip's SHA256."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_zip = tempfile.mkstemp(prefix=f".{folder.name}.", suffix=".zip.part", dir=folder.parent)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".part", dir=folder.parent))
    try:
        got = fetch_into(url, fd, folder, sha256)
        try:
            with zipfile.ZipFile(tmp_zip) as archive:
                unsafe = [name for name in archive.namelist() if not safe_member(name)]
                if unsafe:
                    raise DownloadError(f"refusing {url}: its entry {unsafe[0]!r} would be written outside "
                                        f"{folder.parent}; nothing was kept")
                archive.extractall(tmp_dir)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError) as e:
            raise DownloadError(f"could not unpack {url} ({e}) for {folder}; nothing was kept") from None
        if not (tmp_dir / folder.name).is_dir():
            raise DownloadError(f"{url} holds no folder {folder.name}/ at its top; nothing was kept")
        try:
            os.rename(tmp_dir / folder.name, folder)  # the whole folder appears at once (or not at all)
        except OSError as e:
            raise DownloadError(f"could not put {folder} in place ({e.strerror}); nothing was kept") from None
        return got
    finally:
        Path(tmp_zip).unlink(missing_ok=True)
        shutil.rmtree(tmp_dir, ignore_errors=True)  # what the zip held besides the folder, if anything


def fetch(data_dir: Path, sets: list[str] | None = None, mirror: str | None = None) -> list[str]:
    """Download the files of `sets` (default: DEFAULT_SETS, all but useb) into `data_dir`, skipping those already
    there with the right checksum (a zip: whose folder is there). `mirror`: a base URL (file:// works) holding the
    same layout, used instead of the sources. Returns the paths, relative to `data_dir`, of the files it
    downloaded (a zip: the folder it unpacked). Raises DownloadError."""
    data_dir = Path(data_dir)
    names = list(DEFAULT_SETS) if sets is None else list(sets)
    unknown = [name for name in names if name not in SETS]
    if unknown:
        raise DownloadError(f"unknown data set {', '.join(unknown)}; choose from {', '.join(SETS)}")
    files = list({f.dest: f for name in names for f in SETS[name]}.values())  # each file once

    downloaded = []
    for i, f in enumerate(files, 1):
        dest = data_dir / f.dest
        step = f"[{i}/{len(files)}] {f.dest}"
        url = f.url if mirror is None else f"{mirror.rstrip('/')}/{urllib.parse.quote(f.dest)}"
        if f.unpack:  # a zip: its folder is only ever renamed into place complete, so being there is enough
            folder = dest.parent / f.unpack
            rel = folder.relative_to(data_dir).as_posix()
            if folder.is_dir():
                print(f"{step}: already there ({rel}/)")
                continue
            got = download_zip(url, folder, f.sha256)
            note = "sha256 ok" if f.sha256 else f"sha256 {got}, not checked: no known checksum"
            print(f"{step}: downloaded ({note}), unpacked into {rel}/")
            downloaded.append(rel)
            continue
        if dest.is_file() and (f.sha256 is None or sha256_of(dest) == f.sha256):
            print(f"{step}: already there")
            continue
        if dest.is_file():
            print(f"{step}: wrong checksum, downloading it again")
        got = download(url, dest, f.sha256)
        note = "sha256 ok" if f.sha256 else f"sha256 {got}, not checked: no known checksum; kept"
        print(f"{step}: downloaded ({note})")
        downloaded.append(f.dest)
    kept = len(files) - len(downloaded)
    print(f"{len(files)} files in {data_dir} ({len(downloaded)} downloaded, {kept} already there)")
    return downloaded
