"""Generate the demo corpus: ten look-alike datasheets of one fictional regulator family.

The HiQA scenario in miniature (``papers/hiqa-paper.md``, "RAG degradation in
indistinguishable multi-documents"): every datasheet has the same chapters, the same
sentences and the same table layout; only the values differ, so chunks of different
datasheets look alike and a retriever must find the one right part.

Run ``python examples/make_demo_corpus.py`` to rewrite ``llama_index_hiqa/demo_data/NX-20xx.pdf`` and
``questions.jsonl`` (package data; ``examples/data`` links there). Generation is deterministic (fixed values, no dates), so
re-running it reproduces the committed files. Gold pages are recorded while drawing, so they
are exact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Tuple

import pymupdf

OUT = Path(__file__).resolve().parents[1] / "llama_index_hiqa" / "demo_data"  # examples/data links there
FAMILY = "Precision Voltage Regulator"
VENDOR = "Nordax Semiconductors"
PAGE_W, PAGE_H = 595, 842  # A4 points
MARGIN_X, TOP, BOTTOM = 56, 80, 770
BODY, H1, H2, TITLE = 10, 14, 12, 20

# One row per part: output voltage, max current (mA), dropout (mV), quiescent (uA),
# max input (V), operating temperature, package, application focus, accuracy (%), PSRR (dB).
PARTS: List[Dict] = [
    dict(pn="NX-2040", vout="1.2 V", imax=150, drop=95, iq=1.0, vin_max=6, temp=(-40, 85), pkg="SOT-23-5", app="wearable sensor nodes", acc=1.0, psrr=70),
    dict(pn="NX-2041", vout="1.5 V", imax=300, drop=120, iq=2.5, vin_max=6, temp=(-40, 85), pkg="DFN-6", app="Bluetooth audio modules", acc=1.5, psrr=72),
    dict(pn="NX-2042", vout="1.8 V", imax=500, drop=180, iq=18.0, vin_max=16, temp=(-40, 105), pkg="SOT-223", app="FPGA core and I/O rails", acc=1.0, psrr=65),
    dict(pn="NX-2043", vout="2.5 V", imax=800, drop=210, iq=35.0, vin_max=16, temp=(-40, 125), pkg="TO-252", app="industrial PLC backplanes", acc=2.0, psrr=60),
    dict(pn="NX-2044", vout="3.3 V", imax=1000, drop=260, iq=45.0, vin_max=20, temp=(-40, 125), pkg="SOIC-8", app="automotive infotainment head units", acc=1.0, psrr=68),
    dict(pn="NX-2045", vout="5.0 V", imax=1500, drop=340, iq=60.0, vin_max=24, temp=(-40, 125), pkg="TO-263", app="USB power delivery hubs", acc=2.0, psrr=58),
    dict(pn="NX-2046", vout="adjustable 0.8 V to 5.5 V", imax=2000, drop=400, iq=75.0, vin_max=24, temp=(-40, 150), pkg="PowerPAK-8", app="telecom line cards", acc=1.5, psrr=62),
    dict(pn="NX-2047", vout="2.8 V", imax=200, drop=80, iq=0.5, vin_max=5.5, temp=(-20, 85), pkg="WLCSP-4", app="camera image sensors in smartphones", acc=0.5, psrr=80),
    dict(pn="NX-2048", vout="3.0 V", imax=250, drop=110, iq=0.8, vin_max=5.5, temp=(0, 70), pkg="UDFN-4", app="battery-powered medical patches", acc=1.0, psrr=75),
    dict(pn="NX-2049", vout="12 V", imax=600, drop=450, iq=90.0, vin_max=40, temp=(-40, 125), pkg="TO-220", app="electric bicycle motor controllers", acc=3.0, psrr=55),
]

PINOUTS = {
    5: ["VIN", "GND", "EN", "NC", "VOUT"],
    3: ["VIN", "GND", "VOUT"],
    4: ["VIN", "EN", "GND", "VOUT"],
    6: ["VOUT", "FB", "GND", "EN", "NC", "VIN"],
    8: ["VOUT", "SENSE", "GND", "GND", "EN", "PG", "NC", "VIN"],
}
PIN_COUNT = {"SOT-23-5": 5, "DFN-6": 6, "SOT-223": 3, "TO-252": 3, "SOIC-8": 8, "TO-263": 3,
             "PowerPAK-8": 8, "WLCSP-4": 4, "UDFN-4": 4, "TO-220": 3}
PIN_TEXT = {
    "VIN": "Input supply. Bypass with a 1 uF ceramic capacitor to GND.",
    "GND": "Ground.",
    "EN": "Enable input. Drive high to turn the regulator on; do not leave floating.",
    "NC": "No internal connection.",
    "VOUT": "Regulated output. Connect a 2.2 uF ceramic capacitor to GND.",
    "FB": "Feedback input for the resistor divider that sets the output voltage.",
    "SENSE": "Kelvin sense input for the load voltage.",
    "PG": "Power-good open-drain output, low while the output is out of regulation.",
}


class Writer:
    """A tiny flowing-text layout engine that remembers on which page each fact lands."""

    def __init__(self, part: Dict):
        self.part = part
        self.doc = pymupdf.open()
        self.page = None
        self.y = 0.0
        self.pages_of: Dict[str, int] = {}
        self.new_page()

    def new_page(self) -> None:
        self.page = self.doc.new_page(width=PAGE_W, height=PAGE_H)
        header = f"{self.part['pn']} {FAMILY} | {VENDOR} | Datasheet Rev. C"
        self.page.insert_text((MARGIN_X, 40), header, fontname="helv", fontsize=8)
        self.page.draw_line((MARGIN_X, 46), (PAGE_W - MARGIN_X, 46), width=0.5)
        self.y = TOP

    def ensure(self, height: float) -> None:
        if self.y + height > BOTTOM:
            self.new_page()

    def mark(self, key: str) -> None:
        self.pages_of[key] = self.page.number

    def heading(self, text: str, size: float, gap: float = 10) -> None:
        self.ensure(size + gap + 40)  # never leave a heading alone at the bottom
        self.y += gap
        self.page.insert_text((MARGIN_X, self.y + size), text, fontname="hebo", fontsize=size)
        self.y += size + 8

    def paragraph(self, text: str, size: float = BODY, indent: float = 0) -> None:
        width = PAGE_W - 2 * MARGIN_X - indent
        words, line = text.split(), ""
        lines = []
        for word in words:
            trial = f"{line} {word}".strip()
            if pymupdf.get_text_length(trial, fontname="helv", fontsize=size) > width:
                lines.append(line)
                line = word
            else:
                line = trial
        lines.append(line)
        for text_line in lines:
            self.ensure(size + 4)
            self.page.insert_text((MARGIN_X + indent, self.y + size), text_line, fontname="helv", fontsize=size)
            self.y += size + 4
        self.y += 6

    def bullets(self, items: List[str]) -> None:
        for item in items:
            self.paragraph(f"- {item}", indent=8)

    def table(self, caption: str, rows: List[List[str]], widths: List[float]) -> None:
        row_h = 16
        self.ensure(row_h * (len(rows) + 2) + 20)
        self.page.insert_text((MARGIN_X, self.y + BODY), caption, fontname="helv", fontsize=BODY)
        self.y += BODY + 8
        x_edges = [MARGIN_X]
        for w in widths:
            x_edges.append(x_edges[-1] + w)
        top = self.y
        for r, row in enumerate(rows):
            for c, cell in enumerate(row):
                font = "hebo" if r == 0 else "helv"
                self.page.insert_text((x_edges[c] + 4, self.y + 11), cell, fontname=font, fontsize=8.5)
            self.y += row_h
        for r in range(len(rows) + 1):
            yy = top + r * row_h
            self.page.draw_line((x_edges[0], yy), (x_edges[-1], yy), width=0.6)
        for x in x_edges:
            self.page.draw_line((x, top), (x, self.y), width=0.6)
        self.y += 12

    def figure(self, caption: str) -> None:
        self.ensure(110)
        # A tiny generated bitmap keeps the file small; what matters is its box and caption.
        pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 24, 12), 0)
        pix.set_rect(pix.irect, (200, 210, 230))
        rect = pymupdf.Rect(MARGIN_X + 60, self.y, MARGIN_X + 300, self.y + 80)
        self.page.insert_image(rect, pixmap=pix)
        self.y += 86
        self.page.insert_text((MARGIN_X + 60, self.y + 9), caption, fontname="helv", fontsize=9)
        self.y += 22

    def finish(self, path: Path) -> None:
        total = self.doc.page_count
        for page in self.doc:
            page.insert_text((PAGE_W / 2 - 25, 810), f"Page {page.number + 1} of {total}", fontname="helv", fontsize=8)
            page.clean_contents()  # one content stream per page instead of one per insert: small files
        self.doc.set_metadata({"title": f"{self.part['pn']} {FAMILY}", "author": VENDOR, "creator": "make_demo_corpus.py", "producer": "PyMuPDF", "creationDate": "", "modDate": ""})
        self.doc.save(path, garbage=4, deflate=True, no_new_id=True)


def build(part: Dict, out: Path = OUT) -> Dict[str, int]:
    pn, lo, hi = part["pn"], part["temp"][0], part["temp"][1]
    w = Writer(part)
    w.page.insert_text((MARGIN_X, w.y + TITLE), f"{pn} {FAMILY}", fontname="hebo", fontsize=TITLE)
    w.y += TITLE + 6
    w.paragraph(f"Low-dropout linear regulator, {part['vout']} output, {part['imax']} mA, {part['pkg']} package.")

    w.heading("1 Features", H1)
    w.mark("features")
    w.bullets([
        f"Output voltage {part['vout']} with {part['acc']}% accuracy over temperature",
        f"Output current up to {part['imax']} mA",
        f"Dropout voltage {part['drop']} mV at full load",
        f"Quiescent current {part['iq']} uA typical",
        f"Input voltage up to {part['vin_max']} V",
        f"Operating junction temperature {lo} C to {hi} C",
        f"Power supply rejection {part['psrr']} dB at 1 kHz",
    ])
    w.heading("2 Applications", H1)
    w.mark("applications")
    w.bullets([part["app"][0].upper() + part["app"][1:], "Post-regulation of switching converters", "Noise-sensitive analog supplies"])

    w.heading("3 Description", H1)
    w.mark("description")
    w.paragraph(
        f"The {pn} is a low-dropout linear regulator of the NX-204x family. It delivers up to "
        f"{part['imax']} mA from an input of up to {part['vin_max']} V and regulates a "
        f"{part['vout']} output. Current limit and thermal shutdown protect the device and the "
        f"load. The {pn} is stable with small ceramic output capacitors and is designed for "
        f"{part['app']}. It is offered in a {part['pkg']} package."
    )
    w.figure(f"Figure 1. Typical application circuit of the {pn}")
    w.mark("figure")

    w.heading("4 Specifications", H1)
    w.heading("4.1 Absolute maximum ratings", H2, gap=4)
    w.mark("abs_max")
    w.bullets([
        f"Input voltage VIN: -0.3 V to {part['vin_max'] + 2} V",
        "Enable voltage EN: -0.3 V to VIN + 0.3 V",
        f"Junction temperature: {hi + 25} C maximum",
        "Storage temperature: -65 C to 150 C",
    ])
    w.heading("4.2 Electrical characteristics", H2, gap=4)
    w.mark("electrical")
    w.table(
        f"Table 1. Electrical characteristics of the {pn}",
        [
            ["Parameter", "Symbol", "Min", "Typ", "Max", "Unit"],
            ["Output voltage accuracy", "dVOUT", f"-{part['acc']}", "", f"{part['acc']}", "%"],
            ["Maximum output current", "IOUT", "", "", str(part["imax"]), "mA"],
            ["Dropout voltage", "VDO", "", str(part["drop"]), str(int(part["drop"] * 1.3)), "mV"],
            ["Quiescent current", "IQ", "", str(part["iq"]), str(round(part["iq"] * 1.5, 1)), "uA"],
            ["Input voltage range", "VIN", "1.6", "", str(part["vin_max"]), "V"],
            ["PSRR at 1 kHz", "PSRR", "", str(part["psrr"]), "", "dB"],
            ["Operating temperature", "TJ", str(lo), "", str(hi), "C"],
        ],
        [150, 55, 50, 50, 50, 40],
    )
    w.heading("5 Pin configuration", H1)
    w.mark("pins")
    pins = PINOUTS[PIN_COUNT[part["pkg"]]]
    w.paragraph(f"Pin functions of the {pn} in the {part['pkg']} package:")
    w.table(
        f"Table 2. Pin functions ({part['pkg']})",
        [["Pin", "Name", "Function"]] + [[str(i + 1), name, PIN_TEXT[name]] for i, name in enumerate(pins)],
        [30, 50, 315],
    )
    w.heading("6 Ordering information", H1)
    w.mark("ordering")
    code = f"{pn}{part['pkg'].split('-')[0][:2].upper()}"
    w.table(
        "Table 3. Ordering information",
        [
            ["Order code", "Package", "Marking", "Packing"],
            [f"{code}-TR", part["pkg"], pn[3:] + "A", "Tape and reel, 3000 units"],
            [f"{code}-TU", part["pkg"], pn[3:] + "A", "Tube, 100 units"],
        ],
        [110, 90, 70, 170],
    )
    w.finish(out / f"{pn}.pdf")
    return {**w.pages_of, "code": code, "pin_names": pins}


def questions(part: Dict, pages: Dict) -> List[Dict]:
    """Two or three questions per part, each with exactly one right datasheet."""
    pn = part["pn"]
    gold = lambda section, key: [{"document_id": pn, "section": section, "page": pages[key]}]  # noqa: E731
    index = int(pn[-1])
    pool: List[Tuple[str, str, str, str]] = [
        (f"What is the maximum output current of the {pn}?", f"{part['imax']} mA", "4.2 Electrical characteristics", "electrical"),
        (f"What is the typical dropout voltage of the {pn}?", f"{part['drop']} mV", "4.2 Electrical characteristics", "electrical"),
        (f"Which package is the {pn} offered in?", part["pkg"], "6 Ordering information", "ordering"),
        (f"What is the absolute maximum input voltage of the {pn}?", f"{part['vin_max'] + 2} V", "4.1 Absolute maximum ratings", "abs_max"),
        (f"What is the function of pin 3 of the {pn}?", pages["pin_names"][2], "5 Pin configuration", "pins"),
        (f"Which NX-204x regulator is designed for {part['app']}?", pn, "2 Applications", "applications"),
        (f"What is the typical quiescent current of the {pn}?", f"{part['iq']} uA", "4.2 Electrical characteristics", "electrical"),
        (f"What is the order code of the {pn} on tape and reel?", f"{pages['code']}-TR", "6 Ordering information", "ordering"),
    ]
    picks = [pool[index % len(pool)], pool[(index + 3) % len(pool)], pool[(index + 5) % len(pool)]]
    rows = []
    for n, (question, answer, section, key) in enumerate(picks[: 3 if index % 2 == 0 else 2]):
        rows.append({"id": f"{pn}-q{n + 1}", "question": question, "answer": answer, "gold": gold(section, key)})
    return rows


def main(out: Path = OUT) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows: List[Dict] = []
    for part in PARTS:
        pages = build(part, out)
        rows.extend(questions(part, pages))
    with open(out / "questions.jsonl", "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    sizes = sum((out / f"{p['pn']}.pdf").stat().st_size for p in PARTS)
    print(f"wrote {len(PARTS)} datasheets ({sizes / 1024:.0f} KB) and {len(rows)} questions to {out}")


if __name__ == "__main__":
    main()
