"""The word lists of question and label analysis.

STOP_WORDS: English stop words (the list nltk's `stopwords` corpus ships, which Debian does not
package). They are dropped from questions and labels, except that a label made of nothing else
(`won`, `to do`) keeps them, and a question's stop words can match such a label (an edge's only
beside a tag the question matches: lookups.edges.grammar).

NOT_SEARCHED: words beside the stop words that are never full-text terms, although WordNet does
not know most of them (so they would pass for rare names): modal and auxiliary verbs, question
words, and pronouns contracted with an auxiliary. "Would Dana enjoy it?" searches `Dana`, not
`would`. They still match labels (a tag `whose turn` is matched by its words).
"""

STOP_WORDS = frozenset(
    """
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
yourselves he him his himself she she's her hers herself it it's its itself they them their
theirs themselves what which who whom this that that'll these those am is are was were be been
being have has had having do does did doing a an the and but if or because as until while of at
by for with about against between into through during before after above below to from up down
in out on off over under again further then once here there when where why how all any both
each few more most other some such no nor not only own same so than too very s t can will just
don don't should should've now d ll m o re ve y ain aren aren't couldn couldn't didn didn't
doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't
needn needn't shan shan't shouldn shouldn't wasn wasn't weren weren't won won't wouldn wouldn't
""".split()
)

NOT_SEARCHED = frozenset(
    """
can could may might must shall should will would ought cannot can't oughtn't daren't
whose whatever whichever whoever whomever whenever wherever however whether
i'm i've i'll i'd we're we've we'll we'd they're they've they'll they'd he'll he'd she'll she'd
it'll it'd there'll there'd who'll who'd what'll what'd
""".split()
)
