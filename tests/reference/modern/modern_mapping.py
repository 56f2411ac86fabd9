"""make_modern.py's reading of the exported files: which torch tensor each ONNX initializer
holds, from what the file records or by matching values (the initializer map)."""
# Imported by make_modern.py inside its venv only (torch & co. from PyPI).
import collections
import copy
import re

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

# dynamo value_info metadata keys (see the report in manifest.json "what_the_files_record")
K_KIND = "pkg.torch.export.graph_signature.InputSpec.kind"
K_ORIG = "pkg.torch.onnx.original_node_name"
K_FOLDED = "pkg.onnxscript.optimizer.folded_from"
K_SIG = "pkg.torch.export.ExportedProgram.graph_signature"
K_RULE = "pkg.onnxscript.rewriter.rule_name"


# ----------------------------------------------------------------------- reading the files

def all_nodes(graph):
    for n in graph.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from all_nodes(a.g)
            for g in a.graphs:
                yield from all_nodes(g)


def shape_of(vi):
    tt = vi.type.tensor_type
    dims = [d.dim_param if d.HasField("dim_param") else (d.dim_value if d.HasField("dim_value") else "?")
            for d in tt.shape.dim]
    return {"name": vi.name, "dtype": onnx.TensorProto.DataType.Name(tt.elem_type).lower(), "shape": dims}


def parse_signature(mp):
    """graph.metadata_props[K_SIG]: lines 'p_fc_weight: PARAMETER target='fc.weight''."""
    text = {p.key: p.value for p in mp.graph.metadata_props}.get(K_SIG, "")
    sig = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+): (\w+)(?: target='([^']*)')?", line.strip())
        if m and m.group(3):
            sig[m.group(1)] = (m.group(2), m.group(3))
    return sig


def parse_list(s):
    return re.findall(r"'([^']*)'", s or "")


# --------------------------------------------------------------------- mapping by values

def apply_transform(x, steps):
    x = np.asarray(x)
    for s in steps:
        if s["op"] == "transpose":
            x = np.transpose(x, s["perm"])
        elif s["op"] == "slice":
            x = np.take(x, np.arange(s["start"], s["end"]), axis=s["axis"])
        elif s["op"] == "reshape":
            x = x.reshape(s["shape"])
        else:
            raise ValueError(s)
    return x


def realize(rec, values):
    """The initializer's value computed from torch tensors `values` (name -> array) through the
    record's transform: the same function maps parameters, gradients and SGD results."""
    steps = rec["transform"]
    if steps and steps[0]["op"] == "pack":
        out = np.zeros(rec["shape"], np.asarray(next(iter(values.values()))).dtype)
        for pc in steps[0]["pieces"]:
            d, a, b = pc["dst"]
            out[d, a:b] = np.asarray(values[pc["torch"]])[pc["src"][0]:pc["src"][1]]
        return out
    return apply_transform(values[rec["torch_name"]], steps)


def rnn_pack_candidates(model32):
    """ONNX GRU packing of torch nn.GRU weights: W = [dirs, 3H, in] from weight_ih, R = [dirs, 3H, H]
    from weight_hh, B = [dirs, 6H] = [bias_ih | bias_hh]; gates reordered from torch's (r, z, n)
    to ONNX's (z, r, h). One candidate per layer and tensor."""
    out = []
    for mn, m in model32.named_modules():
        if not isinstance(m, nn.GRU):
            continue
        H = m.hidden_size
        order = [(H, 2 * H), (0, H), (2 * H, 3 * H)]  # ONNX gate k takes torch rows order[k]
        dirs = ["", "_reverse"] if m.bidirectional else [""]
        pre = mn + "." if mn else ""
        for layer in range(m.num_layers):
            for what, names in (("W", ["weight_ih"]), ("R", ["weight_hh"]), ("B", ["bias_ih", "bias_hh"])):
                pieces = []
                for d, sfx in enumerate(dirs):
                    for j, base in enumerate(names):
                        tn = "%s%s_l%d%s" % (pre, base, layer, sfx)
                        for k, (a, b) in enumerate(order):
                            pieces.append({"torch": tn, "src": [a, b], "dst": [d, 3 * H * j + k * H,
                                                                               3 * H * j + (k + 1) * H]})
                vals = {pc["torch"]: getattr(m, pc["torch"][len(pre):]).detach().numpy() for pc in pieces}
                first = vals[pieces[0]["torch"]]
                shape = [len(dirs), 3 * H * len(names)] + list(first.shape[1:])
                rec = {"shape": shape, "transform": [{"op": "pack", "layout": "onnx GRU %s" % what,
                                                      "gates": "torch r,z,n -> onnx z,r,h", "pieces": pieces}]}
                out.append((sorted(vals), rec, realize(rec, vals)))
    return out


def value_matches(a, cands):
    """(torch name, transform steps) for every candidate tensor whose data the initializer equals
    exactly, directly or as a transpose, a reshape, a leading-axis slice, or a transposed slice."""
    out = []
    if a.dtype.kind != "f":
        return [(n, []) for n, p in cands.items() if p.dtype == a.dtype and p.shape == a.shape
                and np.array_equal(p, a)]
    flat = a.ravel()
    for n, p in cands.items():
        if p.dtype.kind != "f" or p.size < a.size or a.size == 0:
            continue
        if p.shape == a.shape and np.array_equal(p, a):
            out.append((n, []))
            continue
        if p.size == a.size:
            if np.array_equal(p.ravel(), flat):
                out.append((n, [{"op": "reshape", "shape": list(a.shape)}]))
            elif p.ndim == 2 and a.shape == p.T.shape and np.array_equal(p.T, a):
                out.append((n, [{"op": "transpose", "perm": [1, 0]}]))
            continue
        if a.size < 2 or p.ndim < 1:
            continue
        rows = p.reshape(p.shape[0], -1)
        rowsize = rows.shape[1]
        if a.size % rowsize == 0:  # a is p[s:s+k] (reshaped)
            k = a.size // rowsize
            for s in np.nonzero(rows[:, 0] == flat[0])[0]:
                if s + k <= p.shape[0] and np.array_equal(rows[s:s + k].ravel(), flat):
                    st = [{"op": "slice", "axis": 0, "start": int(s), "end": int(s + k)}]
                    if list(a.shape) != [k] + list(p.shape[1:]):
                        st.append({"op": "reshape", "shape": list(a.shape)})
                    out.append((n, st))
                    break
        if p.ndim == 2 and a.ndim == 2 and a.shape[0] == p.shape[1]:  # a is p[s:s+k].T
            k = a.shape[1]
            for s in np.nonzero(p[:, 0] == a[0, 0])[0]:
                if s + k <= p.shape[0] and np.array_equal(p[s:s + k].T, a):
                    out.append((n, [{"op": "slice", "axis": 0, "start": int(s), "end": int(s + k)},
                                    {"op": "transpose", "perm": [1, 0]}]))
                    break
    return out


def bn_fold_candidates(model32):
    """For each BatchNorm and each Conv with as many output channels: the folded weight/bias."""
    convs = [(n, m) for n, m in model32.named_modules() if isinstance(m, nn.Conv2d)]
    out = []
    for bn_name, bn in model32.named_modules():
        if not isinstance(bn, nn.BatchNorm2d):
            continue
        scale = bn.weight.detach().double() / torch.sqrt(bn.running_var.double() + bn.eps)
        for cn, conv in convs:
            if conv.out_channels != bn.num_features:
                continue
            w = conv.weight.detach().double() * scale.reshape(-1, 1, 1, 1)
            b0 = conv.bias.detach().double() if conv.bias is not None else torch.zeros_like(scale)
            b = bn.bias.detach().double() + (b0 - bn.running_mean.double()) * scale
            out.append((cn, bn_name, w.numpy(), b.numpy()))
    return out


def bn_fused_model(model32, recs, mp):
    """The torch model the BN-folded file computes: each folded Conv+BatchNorm pair replaced by
    torch.nn.utils.fusion.fuse_conv_bn_eval(conv, bn) carrying the file's folded values, the
    BatchNorm by nn.Identity. Turns the bn_folded records into trainable ones of that model."""
    from torch.nn.utils.fusion import fuse_conv_bn_eval
    fused = copy.deepcopy(model32).eval()
    vals = {t.name: numpy_helper.to_array(t) for t in mp.graph.initializer}
    # A folded bias does not depend on the Conv (bias-free Convs), so value matching cannot tell
    # which Conv it belongs to: take the pair from the weight fed to the same Conv node.
    by_name = {r["name"]: r for r in recs}
    for n in all_nodes(mp.graph):
        if n.op_type == "Conv" and len(n.input) > 2 and by_name.get(n.input[2], {}).get("kind") == "bn_folded":
            w, b = by_name[n.input[1]]["transform"][0], by_name[n.input[2]]["transform"][0]
            b["conv"], b["batchnorm"] = w["conv"], w["batchnorm"]
            by_name[n.input[2]]["torch_name"] = w["batchnorm"] + ".bias"
    pairs = collections.defaultdict(dict)
    for r in recs:
        if r["kind"] == "bn_folded":
            st = r["transform"][0]
            pairs[(st["conv"], st["batchnorm"])][st["part"]] = r

    def put_module(name, mod):
        parent, _, leaf = name.rpartition(".")
        setattr(fused.get_submodule(parent) if parent else fused, leaf, mod)

    for (cn, bn), parts in pairs.items():
        new = fuse_conv_bn_eval(fused.get_submodule(cn), fused.get_submodule(bn))
        with torch.no_grad():
            for part, r in parts.items():
                getattr(new, part).copy_(torch.from_numpy(vals[r["name"]]))
        for p in new.parameters():  # a bias made up for a bias-free Conv comes back frozen
            p.requires_grad_(True)
        put_module(cn, new)
        put_module(bn, nn.Identity())
        for part, r in parts.items():
            r["folded"] = r["transform"][0]
            r.update(transform=[], torch_name="%s.%s" % (cn, part), trainable=True,
                     torch_model="bn_fused: %s = fuse_conv_bn_eval(%s, %s), %s = Identity" % (cn, cn, bn, bn))
    bn_left = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in fused.modules())
    return fused, bn_left


# ------------------------------------------------------------------------ initializer map

def map_initializers(mp, model32, spec, folds):
    """One record per initializer: what it is, which torch tensor it holds, how we know."""
    packs = rnn_pack_candidates(model32)
    aliases = {}  # every torch name (tied duplicates too) -> canonical named_parameters() name
    canon_by_id = {}
    for n, p in model32.named_parameters(remove_duplicate=False):
        canon_by_id.setdefault(id(p), n)
        aliases[n] = canon_by_id[id(p)]
    params = {n: p.detach().numpy() for n, p in model32.named_parameters()}
    buffers = {n: b.detach().numpy() for n, b in model32.named_buffers()}
    cands = dict(params)
    cands.update(buffers)
    vi_meta = {v.name: {q.key: q.value for q in v.metadata_props} for v in mp.graph.value_info}
    sig = parse_signature(mp)
    consumers = collections.defaultdict(list)
    for n in all_nodes(mp.graph):
        for i in n.input:
            consumers[i].append(n.op_type)
    recs = []
    for t in mp.graph.initializer:
        a = numpy_helper.to_array(t)
        meta = vi_meta.get(t.name, {})
        rec = {"name": t.name, "shape": list(a.shape), "dtype": str(a.dtype),
               "consumers": sorted(collections.Counter(consumers[t.name]).items())}
        ev = {}
        if meta:
            ev["value_info.metadata_props"] = meta
        if t.metadata_props:
            ev["TensorProto.metadata_props"] = {q.key: q.value for q in t.metadata_props}
        if t.doc_string:
            ev["TensorProto.doc_string"] = t.doc_string
        kind_meta, orig = meta.get(K_KIND), meta.get(K_ORIG)
        if orig in sig:
            ev["graph_signature"] = "%s: %s target='%s'" % (orig, sig[orig][0], sig[orig][1])
        folded = parse_list(meta.get(K_FOLDED))
        matches = value_matches(a, cands)
        ev["value_matches"] = [{"torch": n, "transform": st} for n, st in matches]
        torch_name, transform, kind, method = None, None, "constant", None

        def pick(prefer):
            for n, st in matches:
                if n in prefer:
                    return n, st
            return None

        claimed = None
        if kind_meta and orig in sig:
            claimed = sig[orig][1]
        elif kind_meta:
            claimed = t.name
        if claimed is not None:
            c = aliases.get(claimed, claimed)
            hit = pick({c})
            if hit and hit[1] == []:
                torch_name, transform = hit
                kind = {"PARAMETER": "parameter", "BUFFER": "buffer"}.get(kind_meta, kind_meta.lower())
                method = ("file: value_info[%r].metadata_props %s=%s and %s=%s -> graph_signature target %r; "
                          "confirmed by exact value equality" % (t.name, K_KIND, kind_meta, K_ORIG, orig, claimed))
            else:
                ev["conflict"] = "metadata names %r but the value differs" % claimed
        if torch_name is None and folded:
            srcs = {aliases.get(s, s) for s in folded} & set(cands)
            hit = pick(srcs)
            if hit:
                torch_name, transform = hit
                kind = "parameter_view" if torch_name in params else "buffer_view"
                method = ("file: value_info[%r].metadata_props %s=%s names the source; transform %s found by "
                          "value matching" % (t.name, K_FOLDED, meta[K_FOLDED][:120],
                                              [s["op"] for s in transform] or "identity"))
            elif srcs:
                ev["conflict"] = "folded_from names %s but no transform of it matches the value" % sorted(srcs)
        if torch_name is None and not meta:
            c = aliases.get(t.name)
            hit = pick({c}) if c else None
            if hit and hit[1] == []:
                torch_name, transform = hit
                kind = "parameter" if c in params else "buffer"
                method = "name equals the torch name (the file records nothing else); exact value equality"
            elif t.name in buffers and pick({t.name}):
                torch_name, transform = pick({t.name})
                kind = "buffer"
                method = "name equals the torch buffer name; exact value equality"
            elif matches:
                torch_name, transform = matches[0]
                kind = ("parameter" if torch_name in params else "buffer") + ("_view" if transform else "")
                method = "value matching only (exact equality%s); the file records no provenance" % (
                    ", transform " + "+".join(s["op"] for s in transform) if transform else "")
                if len(matches) > 1:
                    ev["ambiguous"] = True
        if torch_name is None and a.dtype.kind == "f":
            for names, prec, v in packs:
                if list(v.shape) == list(a.shape) and np.array_equal(v, a):
                    torch_name, transform, kind = names, prec["transform"], "parameter_pack"
                    named = sorted({aliases.get(s, s) for s in folded} & set(names))
                    method = (("file: value_info[%r].metadata_props %s names %s; " % (t.name, K_FOLDED, named)
                               if named else "") + "layout found by exact value matching against the ONNX GRU "
                              "packing of the torch weights (gates reordered r,z,n -> z,r,h; B = [b_ih | b_hh])")
                    break
        if torch_name is None and a.dtype.kind == "f" and a.ndim in (1, 4):
            for cn, bn, w, b in folds:
                for part, v in (("weight", w), ("bias", b)):
                    if v.shape == a.shape and np.allclose(a, v, rtol=1e-4, atol=1e-6):
                        torch_name = cn + ".weight" if part == "weight" else bn + ".bias"
                        kind = "bn_folded"
                        transform = [{"op": "bn_fold", "part": part, "conv": cn, "batchnorm": bn,
                                      "formula": "W*g/sqrt(v+eps) per output channel" if part == "weight"
                                      else "beta + (b - mean)*g/sqrt(v+eps)"}]
                        method = ("value matching with tolerance against Conv+BatchNorm folding"
                                  + ("; the initializer keeps the torch name %r but NOT its value" % t.name
                                     if t.name in aliases else ""))
                        break
                if torch_name:
                    break
        if torch_name is None:
            method = ("file: folded_from lists only non-parameter values" if folded else
                      "no metadata, no torch tensor equals it") + "; a constant of the graph"
            if kind_meta:
                method = "file says %s=%s; no value match" % (K_KIND, kind_meta)
        rec.update(kind=kind, torch_name=torch_name, transform=transform or [],
                   torch_aliases=sorted(k for k, v in aliases.items() if v == torch_name and k != torch_name)
                   if isinstance(torch_name, str) else [],
                   trainable=kind in ("parameter", "parameter_view", "parameter_pack"), method=method,
                   evidence=ev)
        recs.append(rec)
    # shared torch tensors: which initializers hold (views of) the same parameter
    by_param = collections.defaultdict(list)
    for r in recs:
        if r["trainable"] and isinstance(r["torch_name"], str):
            by_param[r["torch_name"]].append(r)
    for tn, rs in by_param.items():
        if len(rs) < 2:
            continue
        full = [r for r in rs if not any(s["op"] == "slice" for s in r["transform"])]
        spans = [(s["start"], s["end"]) for r in rs for s in r["transform"] if s["op"] == "slice"]
        overlap = len(full) > 1 or (full and spans) or any(
            a0 < b1 and b0 < a1 for i, (a0, a1) in enumerate(spans) for (b0, b1) in spans[i + 1:])
        for r in rs:
            r["shares_torch_param_with"] = [o["name"] for o in rs if o is not r]
            r["tied"] = bool(overlap)
    held = set()
    for r in recs:
        if r["trainable"]:
            held.update([r["torch_name"]] if isinstance(r["torch_name"], str) else r["torch_name"])
    missing = sorted(set(params) - held)
    return recs, missing


