"""K-loop statistics of the shaders in a NAK_DEBUG=print log (see kloop.sh): for each shader,
the innermost loops around its hmma (tensor-core) instructions, with their instruction counts
by opcode, taken from NAK's last IR dump (after calc_instr_deps)."""
import re
import sys
from collections import Counter

BLOCK = re.compile(r"block(?:\.\w+)? (\d+) (L\d+) \[([^\]]*)\] -> \{")
END = re.compile(r"\} -> \[([^\]]*)\]")


def numbers(text):
    return [int(x) for x in text.split(",") if x.strip()]


def parse(section):
    blocks, order, cur = {}, [], None
    for line in section.split("\n"):
        m = BLOCK.match(line)
        if m:
            cur = int(m.group(1))
            order.append(cur)
            blocks[cur] = {"preds": numbers(m.group(3)), "ins": [], "succ": []}
            continue
        m = END.match(line.strip())
        if m and cur is not None:
            blocks[cur]["succ"] = numbers(m.group(1))
            cur = None
        elif cur is not None and line.strip():
            blocks[cur]["ins"].append(re.sub(r"\s*//.*", "", line.strip()))
    return blocks, order


def natural_loops(blocks, order):
    """Every back edge's natural loop (latch to an earlier header)."""
    pos = {b: i for i, b in enumerate(order)}
    for latch in order:
        for head in blocks[latch]["succ"]:
            if pos[head] > pos[latch]:
                continue
            loop, stack = {head}, [latch]
            while stack:
                b = stack.pop()
                if b not in loop:
                    loop.add(b)
                    stack.extend(blocks[b]["preds"])
            yield loop


def opcode(ins):
    body = ins.split("=", 1)[1].strip() if " = " in ins else ins
    words = body.split()
    return words[1] if words[0].startswith("@") and len(words) > 1 else words[0]


def main(path, verbose):
    sections = open(path).read().split("NAK IR after calc_instr_deps:")[1:]
    for si, section in enumerate(sections):
        blocks, order = parse(section.split("Encoded shader")[0])
        tensor = [b for b in order if any("hmma" in i for i in blocks[b]["ins"])]
        loops = list(natural_loops(blocks, order))
        chosen = []
        for b in tensor:
            around = [loop for loop in loops if b in loop]
            if around:
                inner = min(around, key=len)
                if inner not in chosen:
                    chosen.append(inner)
        if not chosen:
            print(f"shader {si}: no loop around tensor-core instructions")
        for loop in chosen:
            c = Counter(opcode(i) for b in loop for i in blocks[b]["ins"])
            total = sum(c.values())
            prefix = lambda p: sum(v for k, v in c.items() if k.startswith(p))
            print(
                f"shader {si}: K loop of {len(loop)} blocks, {total} instructions "
                f"({total - c['mov']} besides moves); hmma {c['hmma.m16n8k16.f32']}, "
                f"global loads {prefix('ld.global')}, shared stores {prefix('st.shared')}, "
                f"bounds clamps (imnmx) {prefix('imnmx')}, branches {c['bra']}"
            )
            if verbose:
                print("    " + " ".join(f"{k}:{v}" for k, v in c.most_common(25)))


if __name__ == "__main__":
    main(sys.argv[1], "-v" in sys.argv[2:])
