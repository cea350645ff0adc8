import asyncio

import pytest
from llama_index.core.schema import MetadataMode, TextNode

from llama_index_hiqa import schema
from llama_index_hiqa.testing import ScriptedLLM
from llama_index_hiqa.indexes.keyword_index import KeywordIndex, normalize_keyword
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor, _rule_keywords


def rules_only(**kwargs):
    return CriticalKeywordExtractor(use_ner=False, **kwargs)


@pytest.mark.parametrize(
    "variants, expected",
    [
        (["iPhone 15", "iphone-15", "IPHONE15", "iPhone\u00a015"], "iphone15"),
        (["ADC12QJ1600-SP", "adc12qj1600 sp", "ADC12QJ1600SP"], "adc12qj1600sp"),
        (["10-K", "10K", "10 k"], "10k"),
        (["the Coca-Cola Company's", "Coca Cola Company", "Coca-Cola"], "cocacola"),
        (["Best Buy Co., Inc.", "BEST BUY CO., INC.", "Best Buy"], "bestbuy"),
        (["Amcor PLC", "Amcor"], "amcor"),
    ],
)
def test_normalize_keyword_ignores_case_hyphens_spaces(variants, expected):
    assert {normalize_keyword(v) for v in variants} == {expected}


def test_normalize_keyword_of_punctuation_is_empty():
    assert normalize_keyword(" - , ") == ""


def test_identifiers_the_ner_model_misses_are_found():
    kws = rules_only().extract(
        "The OPT3004 replaces the OPT3001; the ADC12QJ1600-SP and TPS7A4700 are new. iPhone 15 ships."
    )
    for expected in ["opt3004", "opt3001", "adc12qj1600sp", "tps7a4700", "iphone15"]:
        assert expected in kws


def test_part_numbers_typed_with_a_space_match_the_printed_code():
    extractor = rules_only()
    assert "opt3004" in extractor.extract("supply current of the OPT 3004?")
    assert "adc12qj1600sp" in extractor.extract("Which package has the ADC 12QJ1600-SP?")
    assert extractor.extract("Revenue 2018 and Section 404") == ["2018"]


def test_units_ordinals_and_money_are_not_identifiers():
    kws = rules_only().extract("Revenue rose $5M to 12m units in the 12th week; 3.3V at 25 MHz.")
    assert not {"5m", "12m", "12th"} & set(kws)


def test_fiscal_years_and_periods():
    extractor = rules_only()
    assert extractor.extract("What was capex in FY2018?") == ["2018"]
    assert extractor.extract("fiscal 2019 results") == ["2019"]
    assert extractor.extract("FY22 guidance") == ["2022"]
    assert extractor.extract("Q2 of FY2024 sales") == ["q22024", "2024"]
    assert extractor.extract("As of FY2023Q1") == ["q12023", "2023"]
    assert extractor.extract("Q3 2021") == ["q32021", "2021"]
    # numbers that merely look like years are not years
    assert extractor.extract("1,2019 units and 2019.5 tons") == []


@pytest.mark.parametrize(
    "text", ["Q2 of FY2023", "FY2023Q2", "FY2023 Q2", "AMCOR 2023Q2 10Q", "Amcor 2Q 2023 Exhibit", "2Q23 results"]
)
def test_a_quarter_has_one_form_however_it_is_written(text):
    # A question's "Q2 of FY2023" must match a file name's "2023Q2" and a release's "2Q 2023".
    keywords = {normalize_keyword(k) for k in _rule_keywords(text)}
    assert "q22023" in keywords
    assert not any(k.endswith("2023q2") or k.startswith("2q") for k in keywords)
    # A question's "Q2 of FY2023" names the year too; a file name's "2023Q2" names the quarter only.
    if text.startswith(("Q2", "FY")):
        assert "2023" in keywords
    if "2023Q2" in text and not text.startswith("FY"):
        assert "2023" not in keywords


def test_sec_form_types_in_any_case():
    extractor = rules_only()
    assert extractor.extract("the AMCOR 8k filing dated July 2022") == ["8k", "2022"]
    assert extractor.extract("per its 10-Q and the annual 10K") == ["10q", "10k"]
    assert extractor.extract("Amcor 2022 8-K") == ["8k", "2022"]
    # a form type inside a longer code is not a form type
    assert "10k" not in extractor.extract("resistor R10-K5 and 810K parts")


def test_structural_words_before_numbers_are_not_products():
    kws = rules_only().extract("See Item 7 and Note 12, page 4, on December 31, 2018.")
    assert kws == ["2018"]


def test_expert_keywords_and_aliases_match_any_spelling():
    extractor = rules_only(
        expert_keywords=["Coca-Cola", "Best Buy"], keyword_aliases={"JnJ": "Johnson & Johnson"}
    )
    assert "cocacola" in extractor.extract("Coca Cola return on assets")
    assert "cocacola" in extractor.extract("COCA-COLA CO")
    assert "bestbuy" in extractor.extract("Which BEST BUY category")
    assert extractor.extract("How did JnJ's sales grow?") == ["johnsonjohnson"]
    # whole words only
    assert "bestbuy" not in extractor.extract("bestbuying habits")


def test_transform_writes_hidden_metadata_with_document_keywords():
    nodes = [
        TextNode(text="Capital expenditures were 1,577 in the year.", id_="a"),
        TextNode(text="Net sales by segment.", id_="b"),
    ]
    for node in nodes:
        schema.set_segment_facts(node, document_id="3M_2018_10K", document_title="3M 2018 10-K", position=0)
    out = rules_only()(nodes)
    assert out is nodes
    for node in nodes:
        kws = schema.get_critical_keywords(node)
        assert {"3m", "2018", "10k"} <= set(kws)
        assert "critical_keywords" not in node.get_content(MetadataMode.EMBED)
        assert "critical_keywords" not in node.get_content(MetadataMode.LLM)
    assert nodes[0].text == "Capital expenditures were 1,577 in the year."


def test_document_keywords_can_be_switched_off():
    node = TextNode(text="Net sales by segment.", id_="b")
    schema.set_segment_facts(node, document_id="d", document_title="3M 2018 10-K", position=0)
    rules_only(include_document_keywords=False)([node])
    assert schema.get_critical_keywords(node) == []


def test_llm_keywords_realistic_and_malformed():
    llm = ScriptedLLM(
        responses=[
            "['Lord Burleigh', 'British peer']",
            "garbage without brackets, ACME Widget",
            TimeoutError("slow LLM"),
        ]
    )
    extractor = rules_only(llm=llm)
    assert extractor.extract("text one") == ["lordburleigh", "britishpeer"]
    assert extractor.extract("text two") == ["garbagewithoutbrackets", "acmewidget"]
    # an LLM error keeps the rule keywords and does not raise
    assert extractor.extract("FY2020 text") == ["2020"]
    assert llm.calls == 3


def test_acall_runs_llm_per_node():
    llm = ScriptedLLM(responses=lambda prompt: "['Widget']")
    nodes = [TextNode(text=f"part OPT300{i}", id_=str(i)) for i in range(3)]
    asyncio.run(rules_only(llm=llm, include_document_keywords=False).acall(nodes))
    assert [schema.get_critical_keywords(n) for n in nodes] == [
        [f"opt300{i}", "widget"] for i in range(3)
    ]
    assert llm.calls == 3


def test_keyword_index_counts_and_persists(tmp_path):
    index = KeywordIndex()
    index.add("n1", ["OPT3004", "Texas Instruments"])
    index.add("n2", ["OPT3001", "texas-instruments"])
    assert index.match_counts(["opt3004", "Texas Instruments", "TEXAS INSTRUMENTS"]) == {"n1": 2, "n2": 1}
    assert index.match_counts([]) == {}
    index.add("n1", ["other"])  # re-adding replaces
    assert index.nodes_with("opt3004") == set()
    index.persist(tmp_path)
    loaded = KeywordIndex.from_persist_dir(tmp_path)
    assert loaded.keywords_of("n2") == ["opt3001", "texasinstruments"]
    assert len(loaded) == 2 and "n1" in loaded
    assert loaded.document_frequency("Texas Instruments") == 1


@pytest.mark.slow
def test_ner_adds_named_entities():
    kws = CriticalKeywordExtractor().extract("Texas Instruments sells the OPT3004 to Apple in Dallas.")
    assert {"texasinstruments", "opt3004"} <= set(kws)


@pytest.mark.slow
def test_ner_runs_without_the_pipes_it_does_not_need():
    from llama_index_hiqa.models.defaults import load_ner_model
    from llama_index_hiqa.transforms.critical_keywords import _pipes_not_needed_for_ner

    nlp = load_ner_model()
    disabled = _pipes_not_needed_for_ner(nlp)
    assert "ner" not in disabled and {"parser", "tagger", "tok2vec"} <= set(disabled)
    text = "Apple Inc. reported revenue of $394 billion in fiscal 2022 in its Form 10-K filed in Cupertino."
    full = [(e.text, e.label_) for e in nlp(text).ents]
    lean = [(e.text, e.label_) for e in next(nlp.pipe([text], disable=disabled)).ents]
    assert lean == full and ("Apple Inc.", "ORG") in lean


def test_ner_over_node_text_is_skipped_above_ner_max_nodes_but_titles_keep_it(monkeypatch):
    from llama_index.core.schema import TextNode

    seen = []
    extractor = CriticalKeywordExtractor(ner_max_nodes=2)
    original = CriticalKeywordExtractor._extract_many

    def spy(self, texts, ner=True):
        seen.append((len(texts), ner))
        return original(self, texts, ner=False)  # no spaCy in this test: only who asks for it

    monkeypatch.setattr(CriticalKeywordExtractor, "_extract_many", spy)
    nodes = [TextNode(text=f"Revenue of FY2023 part {i}") for i in range(3)]
    for node in nodes:
        schema.set_segment_facts(node, document_id="d", document_title="Acme Corp 2023 Annual Report", position=0)
    extractor(nodes)
    assert (3, False) in seen  # three nodes > 2: no NER over the text
    assert (1, True) in seen  # the one distinct title still goes through NER
    assert "2023" in schema.get_critical_keywords(nodes[0])
    seen.clear()
    extractor(nodes[:2])
    assert (2, True) in seen


def test_each_title_is_extracted_once_by_an_extractor(monkeypatch):
    seen = []
    original = CriticalKeywordExtractor._extract_many

    def spy(self, texts, ner=True):
        seen.append(list(texts))
        return original(self, texts, ner=False)

    monkeypatch.setattr(CriticalKeywordExtractor, "_extract_many", spy)
    extractor = CriticalKeywordExtractor(use_ner=False)
    first = extractor.title_keywords(["Acme_2023_10K", "Beta Corp 2022"])
    again = extractor.title_keywords(["Beta Corp 2022", "Gamma 2021", "Acme 2023 10K"])
    assert seen == [["Acme 2023 10K", "Beta Corp 2022"], ["Gamma 2021"]]
    assert again[0] == first[1] and again[2] == first[0] and "2023" in first[0]
    again[0].append("changed by the caller")
    assert "changed by the caller" not in extractor.title_keywords(["Beta Corp 2022"])[0]
    assert len(seen) == 2
    other = CriticalKeywordExtractor(use_ner=False, min_length=5)  # other settings: its own memo
    assert other.title_keywords(["Beta Corp 2022"]) == [[]] and len(seen) == 3
