"""Document titles read from the document itself (cover facts, metadata title, file name)."""

from llama_index_hiqa.readers.titles import (
    CoverLine,
    cover_facts,
    document_title,
    file_name_title,
    informative_metadata_title,
    largest_cover_line,
)


def _sec_cover(name="3M COMPANY", form="FORM 10-K", period="For the fiscal year ended December 31, 2018", page=0):
    lines = [
        ("UNITED STATES", 12.6, True), ("SECURITIES AND EXCHANGE COMMISSION", 12.6, True),
        ("Washington, D.C. 20549", 7.2, True), (form, 12.6, True), ("(Mark One)", 7.2, False),
        ("☒ ANNUAL REPORT PURSUANT TO SECTION 13 OR 15(d) OF THE SECURITIES EXCHANGE ACT OF 1934", 7.2, True),
        (period, 7.2, True), ("or", 7.2, False),
        ("For the transition period from __________ to __________", 7.2, True),
        ("Commission file number 1-3285", 7.2, True),
    ]
    if name:
        lines.append((name, 12.6, True))
    lines += [
        ("(Exact name of registrant as specified in its charter)", 7.2, False),
        ("Delaware", 7.2, True), ("41-0417775", 7.2, True),
        ("Large accelerated filer ý", 9.0, False),
    ] + [("Indicate by check mark whether the registrant is a shell company.", 7.2, False)] * 20
    return [CoverLine(t, s, b, page) for t, s, b in lines]


def test_sec_cover_gives_company_form_and_period():
    facts = cover_facts(_sec_cover())
    assert (facts.name, facts.form, facts.period) == ("3M Company", "Form 10-K", "fiscal year ended December 31, 2018")
    # Never the accession number of the metadata or the commission's name.
    title = document_title(_sec_cover(), "0000066740-19-000010", "3M_2018_10K")
    assert title == "3M Company, Form 10-K, fiscal year ended December 31, 2018"


def test_quarterly_and_current_report_periods():
    q = cover_facts(_sec_cover("AMCOR PLC", "FORM\xa010-Q", "For the Quarterly Period Ended December 31, 2022"))
    assert (q.name, q.form, q.period) == ("Amcor PLC", "Form 10-Q", "quarter ended December 31, 2022")
    k = cover_facts(_sec_cover("Johnson & Johnson", "FORM 8-K", "Date of report (Date of earliest event reported): August\xa030, 2023"))
    assert (k.form, k.period) == ("Form 8-K", "report dated August 30, 2023")
    upper = cover_facts(_sec_cover(period="THE FISCAL YEAR ENDED MAY 29, 2022"))
    assert upper.period == "fiscal year ended May 29, 2022"


def test_file_name_is_appended_when_it_names_something_new():
    title = document_title(_sec_cover("SQUARE, INC."), "", "BLOCK_2020_10K")
    assert title.startswith("Square, Inc., Form 10-K, fiscal year ended December 31, 2018")
    assert title.endswith("(BLOCK 2020 10K)")
    # Everything the file name says is in the title already: not repeated.
    assert "(" not in document_title(_sec_cover(), "", "3M_2018_10K")


def test_cover_without_a_text_name_falls_back_to_the_file_name_not_a_checkbox_row():
    title = document_title(_sec_cover(name=""), "Document", "COCACOLA_2017_10K")
    assert title == "COCACOLA 2017 10K, Form 10-K, fiscal year ended December 31, 2018"


def test_designed_title_page_before_the_form_cover():
    lines = [CoverLine("FORM 10-K", 29.1, False, 0)] + _sec_cover("NIKE, Inc.", page=1)
    assert document_title(lines, "Nike 2023 Proxy", "NIKE_2023_10K").startswith("NIKE, Inc., Form 10-K, fiscal year")


def test_datasheet_largest_line_and_informative_metadata():
    lines = [
        CoverLine("NX-2043 Precision Voltage Regulator | Nordax | Datasheet Rev. C", 8.0, False),
        CoverLine("NX-2043 Precision Voltage Regulator", 20.0, True),
        CoverLine("1 Features", 14.0, True),
    ] + [CoverLine("Output current up to 800 mA and more body text", 10.0, False)] * 10
    assert largest_cover_line(lines) == "NX-2043 Precision Voltage Regulator"
    assert document_title(lines, "", "NX-2043") == "NX-2043 Precision Voltage Regulator"
    assert document_title(lines, "NX-2043 Datasheet", "NX-2043") == "NX-2043 Datasheet"


def test_body_sized_text_is_not_a_title():
    lines = [CoverLine("FOR IMMEDIATE RELEASE", 10.6, True)] + [CoverLine("Sales grew by 4% in the quarter", 10.6, False)] * 5
    assert largest_cover_line(lines) == ""
    assert document_title(lines, "", "JOHNSON_JOHNSON_2022Q4_EARNINGS") == "JOHNSON JOHNSON 2022Q4 EARNINGS"


def test_uninformative_metadata_titles():
    for useless in ("0001018724-18-000005", "Document", "Microsoft Word - F20_10K_VFinal", "untitled", "",
                    "10Q Doc & Exhibits-2022-08-03-15-21", "UNITED STATES"):
        assert informative_metadata_title(useless) == "", useless
    assert informative_metadata_title("10-K - 02/07/2019 - 3M Company") == "10-K - 02/07/2019 - 3M Company"
    assert informative_metadata_title("ADBE 10K FY15") == "ADBE 10K FY15"


def test_file_name_titles():
    assert file_name_title("AMAZON_2019_10K") == "AMAZON 2019 10K"
    assert file_name_title("widget-manual") == "widget-manual"
    for useless in ("0001018724-18-000005", "scan0001", "document", "3f2a9c0d1b4e5f60718293a4b5c6d7e8", "123456", ""):
        assert file_name_title(useless) == "", useless


def test_nothing_usable_keeps_the_stem():
    assert document_title([], "", "scan0001") == "scan0001"
