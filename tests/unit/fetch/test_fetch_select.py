"""File selection: quant names, shard sets, globs."""

from __future__ import annotations

import pytest

from splitserve._errors import UsageError
from splitserve.fetch import FetchError
from splitserve.fetch._select import RemoteFile, quant_labels, select_files, select_quant, shard_sets, split_name


def _f(path: str, size: int = 10) -> RemoteFile:
    return RemoteFile(path, size, "0" * 64 if path.endswith(".gguf") else None, "b" * 40)


UNSLOTH = [
    _f(".gitattributes"),
    _f("README.md"),
    _f("M-Q8_0.gguf"),
    _f("M-IQ4_XS.gguf"),
    _f("M-UD-Q4_K_XL.gguf"),
    *(_f(f"UD-IQ4_XS/M-UD-IQ4_XS-0000{i}-of-00003.gguf") for i in (1, 2, 3)),
    *(_f(f"BF16/M-BF16-0000{i}-of-00002.gguf") for i in (1, 2)),
    _f("mmproj-F16.gguf"),
]


def test_split_name_follows_llama_cpp_naming() -> None:
    assert split_name("d/M-UD-IQ4_XS-00002-of-00003.gguf") == ("d/M-UD-IQ4_XS", 2, 3)
    assert split_name("M-Q8_0.gguf") is None
    assert split_name("M-0002-of-0003.gguf") is None  # llama.cpp uses five digits


def test_shard_sets_group_split_files_per_folder() -> None:
    sets = {s.name: s for s in shard_sets(UNSLOTH)}
    assert sets["UD-IQ4_XS/M-UD-IQ4_XS"].count == 3
    assert len(sets["UD-IQ4_XS/M-UD-IQ4_XS"].files) == 3
    assert sets["UD-IQ4_XS/M-UD-IQ4_XS"].first == "UD-IQ4_XS/M-UD-IQ4_XS-00001-of-00003.gguf"
    assert sets["M-Q8_0"].count == 1 and sets["mmproj-F16"].is_mmproj


def test_labels_strip_the_shared_model_name() -> None:
    labels = quant_labels(shard_sets(UNSLOTH))
    assert labels["UD-IQ4_XS/M-UD-IQ4_XS"] == "UD-IQ4_XS"
    assert labels["M-Q8_0"] == "Q8_0" and labels["BF16/M-BF16"] == "BF16"


def test_quant_selects_its_whole_shard_set() -> None:
    chosen = select_files(UNSLOTH, quants=["UD-IQ4_XS"])
    assert [f.path for f in chosen] == [f"UD-IQ4_XS/M-UD-IQ4_XS-0000{i}-of-00003.gguf" for i in (1, 2, 3)]


def test_quant_match_is_case_insensitive_and_exact_label_wins() -> None:
    # IQ4_XS is a suffix of UD-IQ4_XS too; the set labelled exactly IQ4_XS is meant
    assert select_quant(shard_sets(UNSLOTH), "iq4_xs").name == "M-IQ4_XS"
    assert select_quant(shard_sets(UNSLOTH), "Q4_K_XL").name == "M-UD-Q4_K_XL"


def test_unknown_quant_names_the_choices() -> None:
    with pytest.raises(UsageError) as exc:
        select_files(UNSLOTH, quants=["Q2_K"])
    assert "UD-IQ4_XS" in str(exc.value) and "Q8_0" in str(exc.value)
    assert "mmproj" not in str(exc.value)


def test_ambiguous_quant_is_refused() -> None:
    files = [_f("a/X-Q4_0.gguf"), _f("b/Y-Q4_0.gguf")]
    with pytest.raises(UsageError, match="matches 2 shard sets"):
        select_files(files, quants=["Q4_0"])


def test_incomplete_shard_set_is_refused() -> None:
    files = [f for f in UNSLOTH if "00002-of-00003" not in f.path]
    with pytest.raises(FetchError, match="2 of the 3 shards"):
        select_files(files, quants=["UD-IQ4_XS"])


def test_include_and_quant_are_a_union() -> None:
    chosen = select_files(UNSLOTH, includes=["*.md", "mmproj*"], quants=["Q8_0"])
    assert [f.path for f in chosen] == ["M-Q8_0.gguf", "README.md", "mmproj-F16.gguf"]


def test_include_matches_folders_and_reports_no_match() -> None:
    assert len(select_files(UNSLOTH, includes=["BF16/*"])) == 2
    with pytest.raises(UsageError, match="matches no file"):
        select_files(UNSLOTH, includes=["*.safetensors"])


def test_no_selection_means_every_file() -> None:
    assert len(select_files(UNSLOTH)) == len(UNSLOTH)
