"""benchmarks/figures.py redraws the README's bar charts from the committed JSON, the same bytes
each time, and the README shows files that exist."""
import hashlib
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_figures_regenerate_byte_for_byte(tmp_path):
    digests = []
    for out in (tmp_path / "a", tmp_path / "b"):
        proc = subprocess.run([sys.executable, "benchmarks/figures.py", "--out", str(out)], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        digests.append({p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.glob("*.png")})
    assert digests[0] == digests[1] and set(digests[0]) == {"throughput_vs_sb3.png", "ga_generation.png",
                                                            "curves_td3_halfcheetah.png", "curves_sac_halfcheetah.png",
                                                            "curves_crossq_halfcheetah.png", "curves_td7_hopper.png",
                                                            "curves_dqn_minatar_breakout.png", "curves_dqn_atari_breakout.png"}
    committed = os.path.join(ROOT, "docs", "figures")
    for name, digest in digests[0].items():  # the committed pictures are this script's output
        with open(os.path.join(committed, name), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest, f"docs/figures/{name}: rerun benchmarks/figures.py"


def test_the_readmes_pictures_are_the_scripts_output():
    """Every picture the README shows is one benchmarks/figures.py draws from committed data."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import figures

    drawn = {"throughput_vs_sb3.png", "ga_generation.png", *figures.CURVE_FIGURES}
    text = open(os.path.join(ROOT, "README.md")).read()
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text) + re.findall(r'<img src="([^"]+)"', text)
    assert len(pictures) >= 4
    for path in pictures:
        assert os.path.exists(os.path.join(ROOT, path)), path
        assert os.path.dirname(path) == "docs/figures" and os.path.basename(path) in drawn, path
