// Head names, spelt as attnviz.labels.head_name spells them: headName(3, 7) is "L3H7", head 7 of layer 3.
// Loaded first, before every other script of the page and of the atlas, which all name heads with it.
function headName(layer, head) { return "L" + layer + "H" + head; }
