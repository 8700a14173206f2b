"""The Gradio chat demo: `build_demo(pipelines)` returns the Blocks app, `launch` serves it.

Each browser session keeps its own conversation in `gr.State` (see `apps.session`); pipelines
are shared, built lazily per answering path (see `apps.pipelines`). Every answer shows its
evidence passage with the answer span marked, the retrieved passages (in an accordion) and the
latency of each stage. Nothing here reaches the network: analytics are off, the server binds
127.0.0.1 unless told otherwise and no share link is made.
"""
from __future__ import annotations

import functools
from html import escape
from typing import Any

from .chat import TurnView, ask
from convqa.front.embedded import RETRIEVER_CHOICES

from .pipelines import EMBEDDED_READERS, BuildFn, PipelineCache
from .session import ChatSession

TITLE = "convqa: conversational question answering"
INTRO = ("Ask a question, then follow-up questions: each answer is read from the passages "
         "retrieved for the whole conversation. **New conversation** forgets the history.")
CSS = """
.convqa-answer { background: #ffe066; color: #000; padding: 0 2px; border-radius: 2px; }
.convqa-passages li { margin-bottom: 0.6em; }
"""
DEFAULT_TOP_K = 5
MAX_TOP_K = 20
ANSWER_QUEUE = "convqa-answer"


def _notice_html(text: str) -> str:
    return f'<p class="convqa-notice">{escape(text)}</p>' if text else ""


def _latency_html(latency: str, query: str) -> str:
    """The stage timings, and the query the history strategy made (shows what a follow-up
    question was expanded to)."""
    lines = [f'<small class="convqa-latency">{escape(latency)}</small>'] if latency else []
    if query:
        lines.append(f'<small class="convqa-query">Query: {escape(query)}</small>')
    return f'<p>{"<br>".join(lines)}</p>' if lines else ""


def _outputs(view: TurnView) -> tuple:
    return (view.session, view.messages, _notice_html(view.notice), view.evidence,
            view.passages, _latency_html(view.latency, view.query))


def respond_outputs(pipelines: PipelineCache, question: str | None, session: ChatSession | None,
                    retriever: str, reader: str, top_k: float | None) -> tuple:
    """The send button: (question box, session, chat, notice, evidence, passages, latency).
    The question stays in its box when nothing was answered, so it can be fixed and resent."""
    view = ask(pipelines, session or ChatSession(), question, retriever, reader, top_k)
    return (question if view.notice else "",) + _outputs(view)


def restart_outputs() -> tuple:
    """The "New conversation" button: the same outputs, all empty, and a fresh session."""
    return ("",) + _outputs(TurnView(ChatSession()))


def reader_choices(pipelines: PipelineCache, retriever: str, reader: str) -> dict[str, Any]:
    """The reader dropdown after choosing `retriever`: its readers, keeping `reader` when it
    is one of them, else the first (a phrase index offers only "none")."""
    choices = list(pipelines.readers_for(retriever))
    return {"choices": choices, "value": reader if reader in choices else choices[0]}


def build_demo(pipelines: PipelineCache | BuildFn, *, title: str = TITLE,
               top_k: int = DEFAULT_TOP_K, max_top_k: int = MAX_TOP_K) -> Any:
    """The chat app over `pipelines`: a `PipelineCache`, or a function (retriever, reader) ->
    Pipeline offered with the embedded choices (dense/bm25/hybrid x extractive/none)."""
    import gradio as gr

    if not isinstance(pipelines, PipelineCache):
        pipelines = PipelineCache(pipelines, RETRIEVER_CHOICES, EMBEDDED_READERS)
    top_k = max(1, min(top_k, max_top_k))
    respond = functools.partial(respond_outputs, pipelines)

    with gr.Blocks(title=title, analytics_enabled=False) as demo:
        session = gr.State(ChatSession())
        gr.Markdown(f"## {title}\n{INTRO}")
        with gr.Row():
            retriever = gr.Dropdown(list(pipelines.retrievers), value=pipelines.default[0],
                                    label="Retriever", elem_id="convqa-retriever")
            # the page lists the chosen retriever's readers; the API may name any reader
            # (`ask` says when it does not go with the retriever)
            reader = gr.Dropdown(list(pipelines.readers_for(pipelines.default[0])),
                                 value=pipelines.default[1], label="Reader",
                                 elem_id="convqa-reader", allow_custom_value=True)
            k = gr.Slider(1, max_top_k, value=top_k, step=1, label="Passages (top-k)",
                          elem_id="convqa-top-k")
        chatbot = gr.Chatbot(label="Conversation", elem_id="convqa-chat", height=320,
                             render_markdown=False, feedback_options=None,
                             buttons=["copy", "copy_all"])
        question = gr.Textbox(label="Question", placeholder="e.g. Who directed 2001: A Space "
                              "Odyssey?", elem_id="convqa-question", autofocus=True)
        with gr.Row():
            send = gr.Button("Ask", variant="primary", elem_id="convqa-ask")
            new = gr.Button("New conversation", elem_id="convqa-new")
        notice = gr.HTML(elem_id="convqa-notice-box", js_on_load=None)
        latency = gr.HTML(elem_id="convqa-latency-box", js_on_load=None)
        gr.Markdown("### Evidence")
        evidence = gr.HTML(elem_id="convqa-evidence-box", js_on_load=None)
        with gr.Accordion("Retrieved passages", open=False, elem_id="convqa-passages-accordion"):
            passages = gr.HTML(elem_id="convqa-passages-box", js_on_load=None)

        outputs = [question, session, chatbot, notice, evidence, passages, latency]
        inputs = [question, session, retriever, reader, k]
        # one answer at a time over both triggers and all sessions: the shared pipelines'
        # tokenizers are not safe to call from two threads at once
        send.click(respond, inputs, outputs, api_name="ask", concurrency_id=ANSWER_QUEUE,
                   concurrency_limit=1)
        question.submit(respond, inputs, outputs, api_visibility="private",
                        concurrency_id=ANSWER_QUEUE, concurrency_limit=1)
        new.click(restart_outputs, None, outputs, api_name="new_conversation")
        # a path offers only its own readers (a phrase index: "none"); no queue, so the list
        # follows the retriever at once even while an answer is being computed
        retriever.change(lambda r, d: gr.Dropdown(**reader_choices(pipelines, r, d)),
                         [retriever, reader], reader, api_visibility="private", queue=False)
        # the chat's own trash icon must forget the history too, not only the messages shown
        chatbot.clear(restart_outputs, None, outputs, api_visibility="private")
    return demo


def launch(demo: Any, host: str = "127.0.0.1", port: int | None = 7860,
           prevent_thread_lock: bool = False, quiet: bool = False) -> Any:
    """Serve `demo` locally: no share link, no analytics, no server-side rendering (which would
    need Node), no MCP server."""
    return demo.launch(server_name=host, server_port=port, share=False, inbrowser=False,
                       prevent_thread_lock=prevent_thread_lock, quiet=quiet, ssr_mode=False,
                       mcp_server=False, enable_monitoring=False, pwa=False,
                       show_error=True, css=CSS)  # Gradio 6 takes css at launch
