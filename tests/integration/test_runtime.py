# SPDX-License-Identifier: LGPL-2.1-or-later
"""The runner's Python environment (COMPAT.md A "/exec", the data-stack bullet; docs/runtime.md):
the data stack imports without noise, computes, and the first chart of a fresh session renders
Chinese text with real glyphs from the sandbox's /etc/matplotlibrc and the prebuilt font cache
that the runner puts into /tmp/matplotlib at session init."""
import base64
import json
import struct

from conftest import run

# import name -> Debian package (tools/runtime-packages)
MODULES = {
    "numpy": "python3-numpy",
    "pandas": "python3-pandas",
    "scipy": "python3-scipy",
    "sklearn": "python3-sklearn",
    "statsmodels": "python3-statsmodels",
    "matplotlib": "python3-matplotlib",
    "seaborn": "python3-seaborn",
    "plotly": "python3-plotly",
    "PIL": "python3-pil",
    "sympy": "python3-sympy",
    "networkx": "python3-networkx",
    "openpyxl": "python3-openpyxl",
    "xlsxwriter": "python3-xlsxwriter",
    "xlrd": "python3-xlrd",
    "pypdf": "python3-pypdf",
    "docx": "python3-docx",
    "reportlab": "python3-reportlab",
    "tabulate": "python3-tabulate",
    "requests": "python3-requests",
    "lxml": "python3-lxml",
    "bs4": "python3-bs4",
    "markdown": "python3-markdown",
    "jinja2": "python3-jinja2",
    "yaml": "python3-yaml",
    # what upstream's images carry (COMPAT.md): dify-sandbox httpx and PySocks, the Aivory
    # sidecar weasyprint
    "httpx": "python3-httpx",
    "socks": "python3-socks",
    "weasyprint": "weasyprint",
}

# Submodules user code reaches for first; some of them import optional parts (pyplot, formula
# parsing, plotly.express needs pandas) that a bare "import X" does not.
SUBMODULES = [
    "matplotlib.pyplot", "statsmodels.api", "statsmodels.formula.api", "sklearn.ensemble",
    "sklearn.model_selection", "scipy.optimize", "scipy.stats", "plotly.express",
    "plotly.graph_objects", "PIL.Image", "lxml.etree", "docx.shared", "reportlab.platypus",
    "reportlab.pdfgen.canvas",
]

CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans CJK JP", "WenQuanYi Zen Hei")
NOISE = ("Glyph", "missing from current font", "findfont", "Matplotlib created a temporary",
         "building the font cache", "Fontconfig", "Warning", "warn")


def exec_json(sid, code, timeout_ms=120000):
    """Run code whose last stdout line is a JSON object; return (result, that object)."""
    res = run(sid, code, timeout_ms=timeout_ms)
    assert res["exit_code"] == 0, res
    lines = res["stdout"].strip().splitlines()
    assert lines, res
    return res, json.loads(lines[-1])


def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    return struct.unpack(">II", data[16:24])


def test_data_stack_imports_without_noise(session):
    code = (
        "import importlib, json\n"
        f"mods = {list(MODULES)!r}\n"
        f"subs = {SUBMODULES!r}\n"
        "versions = {}\n"
        "for m in mods:\n"
        "    mod = importlib.import_module(m)\n"
        "    versions[m] = str(getattr(mod, '__version__', None) or getattr(mod, 'Version', None))\n"
        "for m in subs:\n"
        "    importlib.import_module(m)\n"
        "import matplotlib\n"
        "versions['_backend'] = matplotlib.get_backend()\n"
        "print(json.dumps(versions))\n"
    )
    res, versions = exec_json(session, code)
    assert res["stderr"] == "", res["stderr"]
    for m in MODULES:
        assert versions.get(m) not in (None, "None", ""), (m, versions)
    assert versions["_backend"].lower() == "agg", versions


def test_numeric_smoke(session):
    code = r'''
import io, json
import numpy as np, pandas as pd, scipy.stats, statsmodels.api as sm
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import train_test_split
from sklearn.ensemble import RandomForestClassifier
from tabulate import tabulate

rng = np.random.default_rng(0)
x = rng.normal(size=(200, 2))
y = 3.0 * x[:, 0] - 2.0 * x[:, 1] + 1.0 + rng.normal(scale=0.01, size=200)
lr = LinearRegression().fit(x, y)
ols = sm.OLS(y, sm.add_constant(x)).fit()

df = pd.DataFrame({"城市": ["北京", "上海", "北京", "上海", "广州"], "销售额": [10, 20, 30, 40, 50]})
by_city = df.groupby("城市")["销售额"].sum().to_dict()

labels = (x[:, 0] > 0).astype(int)
xtr, xte, ytr, yte = train_test_split(x, labels, random_state=0)
acc = RandomForestClassifier(n_estimators=20, random_state=0).fit(xtr, ytr).score(xte, yte)

# Excel round trip through both writers and openpyxl; the file is also an artifact.
df.to_excel("/workspace/outputs/sales.xlsx", index=False, engine="xlsxwriter")
back = pd.read_excel("/workspace/outputs/sales.xlsx", engine="openpyxl")
buf = io.BytesIO(); df.to_excel(buf, index=False, engine="openpyxl"); buf.seek(0)
back2 = pd.read_excel(buf)

print(json.dumps({
    "coef": [round(c, 2) for c in lr.coef_], "intercept": round(float(lr.intercept_), 2),
    "ols": [round(float(p), 2) for p in ols.params],
    "by_city": by_city, "acc": acc,
    "det": round(float(np.linalg.det(np.array([[2.0, 1.0], [1.0, 3.0]]))), 6),
    "ttest_p_small": bool(scipy.stats.ttest_ind(rng.normal(0, 1, 500), rng.normal(1, 1, 500)).pvalue < 1e-6),
    "xlsx_equal": bool(back.equals(df)) and bool(back2.equals(df)),
    "table": tabulate(df.head(2), headers="keys", showindex=False).splitlines()[0].split(),
}, ensure_ascii=False))
'''
    res, out = exec_json(session, code)
    assert res["stderr"] == "", res["stderr"]
    assert out["coef"] == [3.0, -2.0] and out["intercept"] == 1.0, out
    assert out["ols"] == [1.0, 3.0, -2.0], out
    assert out["by_city"] == {"上海": 60, "北京": 40, "广州": 50}, out
    assert out["acc"] >= 0.8, out
    assert out["det"] == 5.0 and out["ttest_p_small"] is True, out
    assert out["xlsx_equal"] is True, out
    assert out["table"] == ["城市", "销售额"], out
    files = {f["name"]: f for f in res["files"]}
    assert base64.b64decode(files["sales.xlsx"]["data_base64"])[:2] == b"PK"


# The whole check of a fresh session's first exec: rc, first import, first CJK chart, and a
# tofu test. With DejaVu Sans (no CJK coverage) every CJK character is the same .notdef box, so
# '销' and '售' render identically; with the default font they must differ, and differ from the
# DejaVu render. DejaVu's "Glyph ... missing" warnings are expected there and recorded, not
# printed: stderr must stay empty.
CJK_FIRST_EXEC = r'''
import json, os, time, warnings
pre = sorted(os.listdir("/tmp/matplotlib")) if os.path.isdir("/tmp/matplotlib") else None
pre_stat = {n: os.stat(os.path.join("/tmp/matplotlib", n)) for n in (pre or []) if n.startswith("fontlist-")}
t0 = time.perf_counter()
import matplotlib.pyplot as plt
import_s = time.perf_counter() - t0
import matplotlib, numpy as np
from matplotlib import font_manager
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(["一月", "二月", "三月", "四月"], [120, 135, -20, 160], marker="o")
ax.set_title("销售额趋势")
ax.set_xlabel("月份")
ax.set_ylabel("销售额（万元）")
fig.savefig("/workspace/outputs/chart.png")
chart_s = time.perf_counter() - t0
title_font = ax.title.get_fontname()
plt.close(fig)

def glyph(ch, family=None):
    f = Figure(figsize=(1, 1), dpi=100)
    FigureCanvasAgg(f)
    f.text(0.5, 0.5, ch, fontsize=60, ha="center", va="center",
           **({} if family is None else {"fontfamily": family}))
    f.canvas.draw()
    return np.asarray(f.canvas.buffer_rgba())[..., :3].copy()

d1, d2 = glyph("销"), glyph("售")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    j1, j2 = glyph("销", "DejaVu Sans"), glyph("售", "DejaVu Sans")
ink = lambda a: int((a.min(axis=2) < 128).sum())

cache = "fontlist-v%d.json" % font_manager.FontManager.__version__
st = pre_stat.get(cache)
post = os.stat(os.path.join("/tmp/matplotlib", cache)) if os.path.exists(os.path.join("/tmp/matplotlib", cache)) else None
rc = matplotlib.rcParams
verdict = {
    "default_glyphs_differ": not np.array_equal(d1, d2),
    "dejavu_glyphs_identical": bool(np.array_equal(j1, j2)),
    "default_differs_from_dejavu": not np.array_equal(d1, j1) and not np.array_equal(d2, j2),
    "default_has_ink": ink(d1) > 200 and ink(d2) > 200,
    "dejavu_missing_glyph_warnings": sum("missing from current font" in str(w.message) for w in caught),
}
verdict["real_glyphs"] = (verdict["default_glyphs_differ"] and verdict["dejavu_glyphs_identical"]
                          and verdict["default_differs_from_dejavu"] and verdict["default_has_ink"])
print(json.dumps({
    "import_s": round(import_s, 3), "first_chart_s": round(chart_s, 3),
    "rc_file": matplotlib.matplotlib_fname(), "backend": matplotlib.get_backend(),
    "sans_serif": rc["font.sans-serif"], "unicode_minus": rc["axes.unicode_minus"],
    "dpi": rc["figure.dpi"], "bbox": rc["savefig.bbox"], "title_font": title_font,
    "cache_file": cache, "cache_dir_before_import": pre,
    "cache_prebuilt_owned_by_me": bool(st) and st.st_uid == os.getuid(),
    "cache_untouched_by_import": bool(st) and bool(post) and post.st_mtime_ns == st.st_mtime_ns
                                 and post.st_size == st.st_size,
    "verdict": verdict,
}, ensure_ascii=False))
'''


def test_first_chart_of_a_fresh_session_renders_cjk(session, capsys):
    res, out = exec_json(session, CJK_FIRST_EXEC)
    with capsys.disabled():
        print(f"\n[runtime] first exec of a session: import matplotlib.pyplot {out['import_s']:.3f}s, "
              f"+ first CJK chart saved {out['first_chart_s']:.3f}s; verdict {out['verdict']}")
    stderr = res["stderr"]
    assert not any(n in stderr for n in NOISE), stderr
    assert stderr == "", stderr

    # The sandbox's /etc/matplotlibrc is conf/matplotlibrc.
    assert out["rc_file"] == "/etc/matplotlibrc", out
    assert out["backend"].lower() == "agg", out
    assert out["sans_serif"] == ["Noto Sans CJK SC", "Noto Sans CJK JP", "WenQuanYi Zen Hei", "DejaVu Sans"], out
    assert out["unicode_minus"] is False and out["dpi"] == 120 and out["bbox"] == "tight", out
    assert out["title_font"] in CJK_FONTS, out

    # Real glyphs, not tofu.
    v = out["verdict"]
    assert v["dejavu_missing_glyph_warnings"] > 0, v  # the comparison has teeth
    assert v["dejavu_glyphs_identical"], v
    assert v["default_glyphs_differ"], v
    assert v["default_differs_from_dejavu"], v
    assert v["real_glyphs"] is True, v

    files = {f["name"]: f for f in res["files"]}
    assert "chart.png" in files, res["files"]
    assert files["chart.png"]["mime_type"] == "image/png"
    data = base64.b64decode(files["chart.png"]["data_base64"])
    assert 5_000 < len(data) < 2_000_000, len(data)
    w, h = png_size(data)
    # 6x4 in at figure.dpi 120 with a tight bbox: about 650x460 (at matplotlib's 100 dpi it
    # would be at most 600x400).
    assert 600 < w <= 720 and 400 < h <= 480, (w, h)


def test_font_cache_is_prebuilt_at_session_init(session, capsys):
    """The runner copies fontlist-v<N>.json into the session's /tmp/matplotlib before the first
    exec, owned by the sandbox user; the first import uses it as is (no rebuild)."""
    res, out = exec_json(session, CJK_FIRST_EXEC)
    with capsys.disabled():
        print(f"\n[runtime] prebuilt cache {out['cache_file']}: present before the first import "
              f"{out['cache_dir_before_import']}; import matplotlib.pyplot {out['import_s']:.3f}s")
    assert res["stderr"] == "", res["stderr"]
    assert out["cache_dir_before_import"] is not None, out
    assert out["cache_file"] in out["cache_dir_before_import"], out
    assert out["cache_prebuilt_owned_by_me"] is True, out
    assert out["cache_untouched_by_import"] is True, out


def test_removed_font_cache_is_rebuilt_quietly(session):
    """User code may wipe /tmp/matplotlib; the next exec rebuilds the cache itself without
    printing anything and still finds the CJK font."""
    res = run(session, "import shutil; shutil.rmtree('/tmp/matplotlib', ignore_errors=True); print('ok')")
    assert res["exit_code"] == 0 and res["stdout"] == "ok\n", res
    res, out = exec_json(session, CJK_FIRST_EXEC)
    assert res["stderr"] == "", res["stderr"]
    assert out["title_font"] in CJK_FONTS, out
    assert out["verdict"]["real_glyphs"] is True, out


def test_upstream_extras_work(session):
    """httpx and PySocks (dify-sandbox's image) build a client and a proxy setting without a
    network; weasyprint (the Aivory sidecar's) renders HTML with Chinese text to a PDF artifact."""
    code = r'''
import json, time
t = time.monotonic()
import httpx, socks, weasyprint
import_s = time.monotonic() - t
client = httpx.Client(timeout=1)
transport_ok = isinstance(client, httpx.Client)
client.close()
# The sidecar's sandbox has no network, so no socket at all: the proxy settings are enough.
socks.set_default_proxy(socks.SOCKS5, "127.0.0.1", 1080)
transport_ok = transport_ok and socks.get_default_proxy()[0] == socks.SOCKS5
t = time.monotonic()
weasyprint.HTML(string="<h1>销售报告</h1><p>第一季度 café</p>").write_pdf("/workspace/outputs/report.pdf")
pdf_s = time.monotonic() - t
print(json.dumps({"import_s": import_s, "pdf_s": pdf_s, "transport_ok": transport_ok,
                  "versions": [httpx.__version__, socks.__version__, weasyprint.__version__]}))
'''
    res, out = exec_json(session, code)
    assert res["stderr"] == "", res["stderr"]
    assert out["transport_ok"] is True, out
    print(f"\n[runtime] import httpx, socks, weasyprint {out['import_s']:.2f}s; "
          f"first PDF {out['pdf_s']:.2f}s; versions {out['versions']}")
    files = {f["name"]: f for f in res["files"]}
    assert files["report.pdf"]["mime_type"] == "application/pdf"
    pdf = base64.b64decode(files["report.pdf"]["data_base64"])
    assert pdf.startswith(b"%PDF-") and len(pdf) > 2000, pdf[:64]


def test_dify_dependencies_list_the_extras():
    from test_dify import call

    r = call("GET", "/v1/sandbox/dependencies?language=python3")
    assert r.status == 200 and r.json["code"] == 0, r
    names = {d["name"].lower() for d in r.json["data"]["dependencies"]}
    assert {"httpx", "pysocks", "weasyprint"} <= names, sorted(names)
