// attnviz's step slider, for pages of a generated text (page.js calls it when the page's data has a
// "generation" entry: promptLength, generated, and the kinds of attention whose rows are its tokens).
// Position t's row is token t's attention at the step that processed it, so the slider runs over
// the generated tokens (step 1 to N) and the prompt's last token (step 0: the row that chose the
// first generated token). It only shows the bar and reports a position; page.js draws.
function attnvizStepSlider(generation, tokens, onStep) {
  "use strict";
  const first = Math.max(0, generation.promptLength - 1), last = generation.promptLength + generation.generated - 1;
  const make = (tag, attrs, text) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const bar = make("div", {class: "steps", id: "steps", role: "group", "aria-label": "generation steps"});
  const play = make("button", {type: "button", id: "step-play", title: "play the steps (or pause)", "aria-pressed": "false"},
                    "▶ play");
  const slider = make("input", {type: "range", id: "step", min: first, max: last, step: 1, value: first,
    title: "each token's row is its attention at the step that processed it (← → to step)"});
  const label = make("output", {id: "step-label", for: "step", "aria-live": "polite"});
  const legend = make("span", {class: "legend"});
  legend.append(make("i", {class: "chip prompt"}), "prompt", make("i", {class: "chip generated"}), "generated");
  bar.append(play, make("label", {for: "step"}, "step"), slider, label, legend);

  // "step 3 of 8 · generated token 'mat' (position 12)"
  const describe = (position) => {
    const step = position - generation.promptLength + 1, what = step > 0 ? "generated token" : "the prompt's last token";
    return `step ${step} of ${generation.generated} · ${what} '${tokens[position]}' (position ${position})`;
  };
  const show = (position) => {
    slider.value = position;
    label.textContent = describe(position);
    slider.setAttribute("aria-valuetext", label.textContent);
  };
  let timer = null;
  const pause = () => {
    clearInterval(timer); timer = null;
    play.textContent = "▶ play"; play.setAttribute("aria-pressed", "false");
  };
  const move = (position) => { show(position); onStep(position); };
  slider.addEventListener("input", () => { pause(); move(+slider.value); });
  play.addEventListener("click", () => {
    if (timer !== null) return pause();
    if (+slider.value >= last) move(first);
    play.textContent = "❚❚ pause"; play.setAttribute("aria-pressed", "true");
    timer = setInterval(() => {
      if (+slider.value < last) move(+slider.value + 1);
      if (+slider.value >= last) pause();
    }, 800);
  });
  return {
    element: bar, first, last,
    // Where the slider stands, without telling page.js (it set the position itself).
    set: (position) => show(Math.max(first, Math.min(last, position))),
    contains: (position) => position >= first && position <= last,
    remove: () => { pause(); bar.remove(); },
  };
}
