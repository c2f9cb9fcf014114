#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# mime_type_from_name() against the host's Python: the sidecar answers an artifact's mime_type
# with mimetypes.guess_type(basename)[0] or "application/octet-stream", with the builtin table
# and the host's /etc/mime.types. Compared on many names: with the host's files, with the builtin
# table alone, and with a crafted mime.types that tries the parser's corners.
# usage: test-mime-python.py MIME-TYPE-BINARY
import mimetypes
import os
import subprocess
import sys
import tempfile

OCTET = "application/octet-stream"
# Named in issue #15: application/octet-stream in the old 37-entry table.
ISSUE = ["odt", "ods", "odp", "rtf", "eps", "ps", "ogg", "oga", "flac", "webm", "mov", "avi", "mkv",
         "avif", "heic", "heif", "7z", "rar", "zst", "sqlite", "db", "h5", "hdf5", "wasm", "tex",
         "sh", "c", "h", "cpp", "java", "go", "rs", "ts", "yaml", "yml", "toml", "ini", "epub"]
OLD_TABLE = ["txt", "log", "md", "csv", "tsv", "html", "htm", "css", "xml", "json", "js", "py",
             "png", "jpg", "jpeg", "gif", "bmp", "webp", "svg", "tif", "tiff", "ico", "pdf", "zip",
             "gz", "tgz", "tar", "xls", "xlsx", "doc", "docx", "ppt", "pptx", "mp3", "wav", "mp4",
             "parquet"]
ENCODINGS = ["gz", "Z", "z", "bz2", "xz", "br", "GZ", "BZ2", "zst", "lz4"]
SUFFIXES = ["tgz", "taz", "tz", "tbz2", "txz", "svgz", "TGZ", "Tbz2", "SVGZ"]


def host_extensions():
    exts = set()
    for path in mimetypes.knownfiles:
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    words = line.split()
                    for i, w in enumerate(words):
                        if w.startswith("#"):
                            del words[i:]
                            break
                    exts.update(words[1:])
    return exts


def corpus(extra_exts=()):
    exts = set(ISSUE + OLD_TABLE + SUFFIXES + ENCODINGS) | host_extensions() | set(extra_exts)
    exts |= {e[1:] for e in mimetypes._types_map_default} | {e[1:] for e in mimetypes._common_types_default}
    names = []
    for e in sorted(exts):
        names += [f"a.{e}", f"A.{e.upper()}", f"a.{e.capitalize()}", f"x.y.{e}"]
        names += [f"d.{e}.{c}" for c in ENCODINGS]
    names += [
        "data.csv.gz", "data.csv.GZ", "data.CSV.gz", "archive.tar.gz", "archive.tar.bz2", "a.tar.xz",
        "a.tar.Z", "a.tar.zst", "a.svg.gz", "a.tgz.gz", "a.gz.gz", "a.gz.csv", "a.txt.br", "a.json.xz",
        "noext", "", ".", "..", "...", ".bashrc", ".gz", ".tgz", ".csv.gz", "..png", "a..png", "a.",
        "a.csv.", "a..", ".a.png", "...png", "a...png", "a. png", "a.p ng", "a.png ", " a.png",
        "a:b.png", "a:.png", ":a.png", "a:b:c.csv", "http:x.txt", "data:x,y", "DATA:x,y", "data:xy",
        "Data:a;b,c", "data:,", "data:a=b,c", "data.png", "data:.png", "dat:a.png",
        "\u212a.\u212aMZ", "a.\u212amz", "a.\u212a", "\u9500\u552e\u56fe\u8868.png", "caf\u00e9.txt",
        "\U0001f600.json", "a.\u00e9", "a.P\u00c9", "a.png\u00a0", os.fsdecode(b"bad\xff.csv"),
        os.fsdecode(b"x.\xff\xfe"), "a.tar.gz.tgz", "file.TAR.GZ", "file.Tar.Gz", "a.\tpng",
        "x" * 200 + ".png", "a." + "p" * 250,
    ]
    return names


def run(binary, args, names):
    text = "".join(os.fsencode(n).hex() + "\n" for n in names)
    out = subprocess.run([binary] + args, input=text.encode(), stdout=subprocess.PIPE,
                         check=True).stdout.decode("utf-8", "surrogateescape").splitlines()
    assert len(out) == len(names), (len(out), len(names))
    return out


def compare(what, names, got, guess):
    wrong = []
    for name, g in zip(names, got):
        want = guess(name) or OCTET
        if g != want:
            wrong.append((name, g, want))
    for name, g, want in wrong[:20]:
        print(f"{what}: {name!r}: mime_type_from_name {g}, Python {want}")
    print(f"{what}: {len(names) - len(wrong)} of {len(names)} names as Python "
          f"{sys.version.split()[0]}'s mimetypes")
    return not wrong


CRAFTED = (
    "# comment line\n"
    "text/x-first   foo bar   # a comment: baz is no suffix\n"
    "text/x-second  bar\n"             # later wins
    "text/x-upper   QUX quux\n"        # upper-case keys never match (Python lowers the name)
    "application/x-crlf crlf\r\n"
    "application/x-cr cr\rapplication/x-after-cr aftercr\n"
    "\t  application/x-indented   ind1\tind2\v ind3\f ind4\x1c ind5\x1f ind6\n"
    "application/x-hash-in-word  a#b c\n"
    "#application/x-commented nope\n"
    "application/x-nosuffix\n"
    "text/x-override csv png\n"        # overrides the builtin and host entries
    "application/x-gzip-ext gz tgz tar\n"  # gz is an encoding, tgz a suffix: never reached as types
    "x   dotted.ext\n"                 # a key with a dot can never match
    "last/type foo"                    # no final newline
)
CRAFTED_EXTS = ["foo", "bar", "baz", "qux", "QUX", "quux", "crlf", "cr", "aftercr", "ind1", "ind2",
                "ind3", "ind4", "ind5", "ind6", "a#b", "c", "nope", "nosuffix", "ext", "dotted.ext",
                "a#b.c"]


def main():
    binary = sys.argv[1]
    ok = True
    names = corpus()
    ok &= compare("host files", names, run(binary, [], names), lambda n: mimetypes.guess_type(n)[0])
    builtin = mimetypes.MimeTypes()
    ok &= compare("builtin table", names, run(binary, ["--builtin"], names),
                  lambda n: builtin.guess_type(n)[0])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "mime.types")
        with open(path, "w", newline="") as f:
            f.write(CRAFTED)
        crafted = mimetypes.MimeTypes((path,))
        names = corpus(CRAFTED_EXTS)
        ok &= compare("crafted file", names, run(binary, [path, os.path.join(d, "missing"), d], names),
                      lambda n: crafted.guess_type(n)[0])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
