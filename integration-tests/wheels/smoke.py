"""Popular binary wheels, each imported and exercised with a small real operation.

Prints one line per check, `name: result`, with results that depend only on the inputs
(floats rounded to 10 significant digits), so that the lines of a plain `python` process
and of each interpreter of a `multipy` process can be compared line by line. A check
that raises prints `name: ERROR <type>: <message>` and the script goes on.

`SMOKE_ONLY=a,b` runs only those checks; `SMOKE_THREADS=0` skips the checks that run
library code in a Python thread that then exits.
"""

import os
import sys
import threading
import warnings

# Library warnings (deprecations, "only 4 rounds") go to stderr with a line of source
# context: not results, and not part of the comparison.
warnings.simplefilter("ignore")


def r(x):
    """A float (or a sequence of them) rounded to 10 significant digits, as text."""
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(r(v) for v in x) + "]"
    return f"{float(x):.10g}"


CHECKS = []


def check(name):
    def add(f):
        CHECKS.append((name, f))
        return f

    return add


@check("numpy")
def _():
    import numpy as np

    a = np.arange(1, 10, dtype=float).reshape(3, 3) + np.eye(3)
    x = np.linalg.solve(a, np.array([1.0, 2.0, 3.0]))
    return r([round(v, 9) for v in x]) + " " + np.__version__


@check("scipy.linalg")
def _():
    import numpy as np
    import scipy.linalg as la

    a = np.array([[4.0, 3, 2], [2, 1, 3], [3, 2, 1]])
    p, l, u = la.lu(a)
    return r([la.det(a), float(np.abs(l @ u - p.T @ a).max() < 1e-12)])


@check("scipy.optimize")
def _():
    from scipy.optimize import minimize, rosen

    res = minimize(rosen, [1.3, 0.7, 0.8], method="BFGS", options={"gtol": 1e-9})
    return r([round(v, 5) for v in res.x])


@check("scipy.sparse")
def _():
    import numpy as np
    import scipy.sparse as sp
    from scipy.sparse.linalg import spsolve

    n = 50
    a = sp.diags([-1, 2, -1], [-1, 0, 1], shape=(n, n), format="csr", dtype=float)
    x = spsolve(a, np.ones(n))
    return r([x.sum(), (a @ a).nnz])


@check("scipy.interpolate")
def _():
    import numpy as np
    from scipy.interpolate import CubicSpline

    xs = np.linspace(0, 3, 7)
    return r([CubicSpline(xs, np.sin(xs))(1.234)])


@check("scipy.special+fft")
def _():
    import numpy as np
    from scipy import fft, special

    return r([special.gamma(4.5), abs(fft.fft(np.arange(8.0))[1])])


@check("pandas")
def _():
    import pandas as pd

    df = pd.DataFrame({"k": list("abcabc"), "v": range(6)})
    g = df.groupby("k")["v"].sum()
    return ",".join(f"{k}={v}" for k, v in g.items()) + " " + pd.__version__


@check("pyarrow")
def _():
    import io

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    t = pa.table({"x": list(range(1000)), "s": [str(i % 7) for i in range(1000)]})
    buf = io.BytesIO()
    pq.write_table(t, buf)
    back = pq.read_table(io.BytesIO(buf.getvalue()))
    return f"{pc.sum(back['x']).as_py()} {back.num_rows} {pa.__version__}"


@check("pandas+pyarrow")
def _():
    import pandas as pd

    s = pd.Series(["x", "yy", None, "zzz"], dtype="string[pyarrow]")
    df = pd.DataFrame({"a": [1, 2, 3]}).convert_dtypes(dtype_backend="pyarrow")
    return f"{s.str.len().sum()} {df['a'].dtype}"


@check("duckdb")
def _():
    import duckdb

    con = duckdb.connect()
    v = con.execute("select sum(range), count(*) from range(100000)").fetchone()
    con.close()
    return f"{v} {duckdb.__version__}"


@check("numba")
def _():
    import numpy as np
    from numba import njit

    @njit(cache=False)
    def sumsq(a):
        t = 0.0
        for v in a:
            t += v * v
        return t

    return r([sumsq(np.arange(100.0))])


@check("scikit-learn")
def _():
    import numpy as np
    from sklearn.cluster import KMeans
    from sklearn.linear_model import LinearRegression

    x = np.arange(20.0).reshape(10, 2)
    y = x @ np.array([1.5, -2.0]) + 3
    lr = LinearRegression().fit(x, y)
    km = KMeans(n_clusters=2, n_init=3, random_state=0).fit(x)
    return r([lr.predict([[1.0, 1.0]])[0], sorted(km.cluster_centers_[:, 0])[0]])


@check("statsmodels")
def _():
    import numpy as np
    import statsmodels.api as sm

    x = sm.add_constant(np.arange(10.0))
    y = 2 * np.arange(10.0) + 1 + np.sin(np.arange(10.0))
    return r(list(sm.OLS(y, x).fit().params))


@check("matplotlib")
def _():
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 2), dpi=50)
    ax.plot([0, 1, 2], [0, 1, 4])
    ax.set_title("smoke")
    fig.canvas.draw()
    w, h = fig.canvas.get_width_height()
    png = io.BytesIO()
    fig.savefig(png, format="png")
    plt.close(fig)
    is_png = png.getvalue()[:4] == b"\x89PNG"
    return f"{w}x{h} png={is_png}"


@check("opencv")
def _():
    import cv2
    import numpy as np

    img = (np.arange(64 * 64, dtype=np.uint8) % 251).reshape(64, 64)
    blur = cv2.GaussianBlur(img, (5, 5), 1.0)
    edges = cv2.Canny(img, 50, 150)
    return f"{int(blur.sum())} {int(edges.sum())}"


@check("scikit-image")
def _():
    import numpy as np
    from skimage import filters

    img = np.outer(np.arange(32.0), np.ones(32)) / 32
    return r([filters.sobel(img).sum()])


@check("cryptography")
def _():
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    h = hashes.Hash(hashes.SHA256())
    h.update(b"smoke")
    ct = AESGCM(bytes(range(16))).encrypt(bytes(12), b"payload", b"ad")
    return h.finalize().hex()[:16] + " " + ct.hex()[:16]


@check("lxml")
def _():
    from lxml import etree

    root = etree.fromstring("<a><b n='1'/><b n='2'/><c>t</c></a>")
    return f"{sum(int(n) for n in root.xpath('//b/@n'))} {etree.tostring(root[2]).decode()}"


@check("pyproj")
def _():
    from pyproj import Transformer

    t = Transformer.from_crs("EPSG:4326", "EPSG:3857", always_xy=True)
    return r([round(v, 3) for v in t.transform(2.35, 48.85)])


@check("shapely")
def _():
    from shapely.geometry import Point, Polygon

    p = Polygon([(0, 0), (4, 0), (4, 3), (0, 3)])
    return r([p.area, p.intersection(Point(4, 3).buffer(1.0, 64)).area])


@check("h5py")
def _():
    import h5py
    import numpy as np

    with h5py.File("smoke.h5", "w", driver="core", backing_store=False) as f:
        f["x"] = np.arange(10)
        return str(int(f["x"][()].sum()))


@check("pydantic")
def _():
    from pydantic import BaseModel

    class M(BaseModel):
        a: int
        b: list[float]

    m = M.model_validate({"a": "3", "b": ["1.5", 2]})
    return m.model_dump_json()


@check("json-family")
def _():
    import orjson
    import simplejson
    import ujson

    d = {"a": [1, 2.5, "x"], "b": None}
    return " ".join(
        [orjson.dumps(d).decode(), ujson.dumps(d), simplejson.dumps(d, separators=(",", ":"))]
    )


@check("msgpack")
def _():
    import msgpack

    b = msgpack.packb({"a": [1, 2, 3]})
    return b.hex() + " " + str(msgpack.unpackb(b))


@check("pyyaml")
def _():
    import yaml

    s = yaml.dump({"a": [1, 2], "b": "x"}, Dumper=yaml.CDumper)
    return repr(s) + " " + str(yaml.load(s, Loader=yaml.CLoader))


@check("regex")
def _():
    import regex

    return str(regex.findall(r"\p{Lu}\w+", "Alpha beta Gamma Delta"))


@check("psutil")
def _():
    import psutil

    return str(psutil.Process().pid == os.getpid() and psutil.cpu_count() > 0)


@check("markupsafe")
def _():
    from markupsafe import escape

    return str(escape("<a href='x'>&</a>"))


@check("compression")
def _():
    import brotli
    import lz4.frame
    import zstandard

    data = b"smoke test " * 1000
    z = zstandard.ZstdCompressor(level=3).compress(data)
    l4 = lz4.frame.compress(data)
    br = brotli.compress(data)
    ok = (
        zstandard.ZstdDecompressor().decompress(z) == data
        and lz4.frame.decompress(l4) == data
        and brotli.decompress(br) == data
    )
    return f"{len(z)} {len(br)} {ok}"


@check("bcrypt")
def _():
    import bcrypt

    return bcrypt.kdf(password=b"pw", salt=b"saltsalt", desired_key_bytes=16, rounds=4).hex()


@check("pynacl")
def _():
    import nacl.encoding
    import nacl.hash

    return nacl.hash.sha256(b"smoke", encoder=nacl.encoding.HexEncoder).decode()[:16]


@check("pycryptodome")
def _():
    from Crypto.Cipher import AES
    from Crypto.Hash import SHA256

    ct = AES.new(bytes(16), AES.MODE_ECB).encrypt(bytes(range(16)))
    return SHA256.new(b"smoke").hexdigest()[:16] + " " + ct.hex()


@check("argon2")
def _():
    from argon2.low_level import Type, hash_secret_raw

    return hash_secret_raw(b"pw", b"saltsalt", 1, 64, 1, 16, Type.ID).hex()


@check("rpds")
def _():
    from rpds import HashTrieMap

    m = HashTrieMap({"a": 1}).insert("b", 2)
    return str(sorted(m.items()))


@check("aiohttp")
def _():
    import asyncio

    import aiohttp
    from multidict import MultiDict
    from yarl import URL

    async def main():
        await asyncio.sleep(0)
        return aiohttp.ClientTimeout(total=3).total

    md = MultiDict([("a", 1), ("a", 2)])
    return f"{asyncio.run(main())} {md.getall('a')} {URL('http://x/a/b?q=1').with_query(q=2)}"


@check("pyzmq")
def _():
    import zmq

    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind("inproc://smoke")
    b.connect("inproc://smoke")
    a.send(b"ping")
    got = b.recv()
    a.close()
    b.close()
    ctx.term()
    return got.decode()


@check("greenlet")
def _():
    import greenlet

    out = []

    def child():
        out.append(1)
        greenlet.getcurrent().parent.switch(2)
        out.append(3)

    g = greenlet.greenlet(child)
    v = g.switch()
    g.switch()
    return f"{v} {out}"


@check("sqlalchemy")
def _():
    import sqlalchemy as sa

    eng = sa.create_engine("sqlite://")
    with eng.connect() as c:
        c.execute(sa.text("create table t (x int)"))
        c.execute(sa.text("insert into t values (1), (2), (3)"))
        v = c.execute(sa.text("select sum(x) from t")).scalar()
    eng.dispose()
    return str(v)


@check("numexpr+bottleneck")
def _():
    import bottleneck as bn
    import numexpr as ne
    import numpy as np

    a = np.arange(1000.0)
    a[3] = np.nan
    return r([ne.evaluate("sum(b * 2)", {"b": np.arange(1000.0)}), bn.nanmean(a)])


@check("pywavelets")
def _():
    import pywt

    ca, cd = pywt.dwt([1.0, 2, 3, 4, 5, 6, 7, 8], "db2")
    return r(list(ca))


@check("rapidfuzz")
def _():
    from rapidfuzz import fuzz

    return r([fuzz.ratio("this is a test", "this is a test!")])


@check("xxhash+mmh3")
def _():
    import mmh3
    import xxhash

    return f"{xxhash.xxh64(b'smoke').hexdigest()} {mmh3.hash('smoke')}"


@check("wrapt")
def _():
    import wrapt

    @wrapt.decorator
    def twice(wrapped, instance, args, kwargs):
        return 2 * wrapped(*args, **kwargs)

    @twice
    def f(x):
        return x + 1

    return str(f(3))


@check("polars")
def _():
    import polars as pl

    df = pl.DataFrame({"k": list("abab"), "v": [1, 2, 3, 4]})
    g = df.group_by("k").agg(pl.col("v").sum()).sort("k")
    return str(g.rows())


@check("tiktoken")
def _():
    import tiktoken

    ranks = {bytes([i]): i for i in range(256)}
    ranks[b"ab"] = 256
    enc = tiktoken.Encoding(
        name="smoke", pat_str=r"\w+|\s+", mergeable_ranks=ranks, special_tokens={}
    )
    return str(enc.encode("abab cab"))


@check("jiter")
def _():
    import jiter

    return str(jiter.from_json(b'{"a": [1, 2.5, "x"]}'))


@check("cytoolz")
def _():
    from cytoolz import frequencies

    return str(sorted(frequencies("abracadabra").items()))


@check("kiwisolver")
def _():
    import kiwisolver as kiwi

    x, y = kiwi.Variable("x"), kiwi.Variable("y")
    s = kiwi.Solver()
    s.addConstraint(x + y == 10)
    s.addConstraint(x - y == 2)
    s.updateVariables()
    return r([x.value(), y.value()])


@check("pillow")
def _():
    import hashlib

    from PIL import Image

    im = Image.new("RGB", (32, 32), (10, 20, 30)).rotate(30).resize((16, 16))
    return hashlib.sha256(im.tobytes()).hexdigest()[:16]


@check("charset-normalizer")
def _():
    from charset_normalizer import from_bytes

    return str(from_bytes("Größe élève".encode("utf-8")).best().encoding)


def in_thread(f):
    """Runs f in a new Python thread that then exits; returns its result."""
    out = {}

    def run():
        try:
            out["v"] = f()
        except BaseException as e:  # noqa: BLE001
            out["v"] = f"ERROR {type(e).__name__}: {e}"

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out["v"]


@check("threads: duckdb+pyarrow+polars")
def _():
    if os.environ.get("SMOKE_THREADS") == "0":
        return "skipped"

    def work():
        import duckdb
        import polars as pl
        import pyarrow as pa

        t = pa.table({"x": list(range(100))})
        con = duckdb.connect()
        v = con.execute("select sum(x) from t").fetchone()[0]
        con.close()
        return f"{v} {pl.DataFrame({'a': [1, 2]})['a'].sum()}"

    return " ".join(in_thread(work) for _ in range(3))


def main():
    only = os.environ.get("SMOKE_ONLY")
    wanted = set(only.split(",")) if only else None
    failed = 0
    for name, f in CHECKS:
        if wanted is not None and name not in wanted:
            continue
        try:
            res = f()
        except BaseException as e:  # noqa: BLE001
            failed += 1
            msg = str(e).splitlines()[0] if str(e) else ""
            res = f"ERROR {type(e).__name__}: {msg}"
        print(f"{name}: {res}", flush=True)
    print(f"smoke: {len(CHECKS) - failed if wanted is None else '-'} ok, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__" or os.environ.get("SMOKE_RUN") == "1":
    status = main()
    if __name__ == "__main__":
        sys.exit(status)
