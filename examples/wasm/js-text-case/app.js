// text-case: a toolhost plugin written in JavaScript, built into a WebAssembly component
// with componentize-js (`cargo xtask plugin package examples/wasm/js-text-case`).
//
// It implements the `plugin` world of tool-api/wit/plugin.wit: `describe` lists the tools,
// `execute` runs one call. An error is thrown as a tool-error variant ({tag, val}).

import { log } from 'toolhost:plugin/host@1.0.0';

const CASES = ['upper', 'lower', 'title', 'snake', 'kebab', 'camel'];

const SCHEMA = JSON.stringify({
  type: 'object',
  properties: {
    text: { type: 'string', description: 'The text to convert.' },
    to: { type: 'string', enum: CASES, description: 'The case to convert it to.' },
  },
  required: ['text', 'to'],
  additionalProperties: false,
});

/** The words of a text: split on spaces, punctuation and lower-to-upper changes. */
function words(text) {
  return text
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .split(/[^A-Za-z0-9]+/)
    .filter((w) => w.length > 0);
}

function convert(text, to) {
  const w = words(text);
  switch (to) {
    case 'upper':
      return text.toUpperCase();
    case 'lower':
      return text.toLowerCase();
    case 'title':
      return w.map((x) => x[0].toUpperCase() + x.slice(1).toLowerCase()).join(' ');
    case 'snake':
      return w.map((x) => x.toLowerCase()).join('_');
    case 'kebab':
      return w.map((x) => x.toLowerCase()).join('-');
    case 'camel':
      return w
        .map((x, i) => (i === 0 ? x.toLowerCase() : x[0].toUpperCase() + x.slice(1).toLowerCase()))
        .join('');
    default:
      throw { tag: 'invalid-input', val: `unknown case '${to}'; use one of ${CASES.join(', ')}` };
  }
}

export const tools = {
  describe() {
    return {
      name: 'text-case',
      version: '0.1.0',
      tools: [
        {
          name: 'change_case',
          description: 'Converts a text to upper, lower, title, snake, kebab or camel case.',
          inputSchema: SCHEMA,
          sideEffects: 'none',
          concurrencySafe: undefined,
          timeoutMs: undefined,
          pathParams: [],
        },
      ],
    };
  },

  execute(tool, input) {
    if (tool !== 'change_case') {
      throw { tag: 'failed', val: `text-case has no tool '${tool}'` };
    }
    const args = JSON.parse(input);
    log('debug', `converting ${args.text.length} characters to ${args.to}`);
    return {
      content: [{ tag: 'text', val: convert(args.text, args.to) }],
      success: true,
      metadata: '',
    };
  },
};
