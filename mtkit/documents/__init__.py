"""Documents translated whole: paragraphs split into sentences and rejoined, inline markup
taken out and put back by the word alignment, and the files people translate (HTML,
Markdown, SRT, WebVTT, PO, XLIFF, docx) read and written back with everything but their text
kept.

One interface joins them: a format's reader gives the document's blocks, each a sequence of
`Text` and `Tag` items (`mtkit.documents.inline`); `translate_blocks` translates them
(sentences, alignment, placement); the same reader's `render` writes the translated blocks
back into the document.
"""
