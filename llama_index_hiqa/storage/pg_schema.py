"""The PostgreSQL store's tables, the routes' queries, and the rows a write puts in them.

See [`llama_index_hiqa.storage.postgres`][llama_index_hiqa.storage.postgres] for what each table holds and why writes are one
transaction. BM25 is Okapi BM25 as bm25s scores it ("lucene" method: IDF
log(1 + (N - df + 0.5) / (df + 0.5)), term component tf / (tf + k1 (1 - b + b dl / avgdl)),
k1 = 1.5, b = 0.75) over the tokens ``BM25Retriever`` indexes, computed by one SQL query over
the postings table.
"""

from __future__ import annotations

from typing import Any, List, Sequence

import Stemmer

VECTOR_TABLE = "hiqa_vectors"  # PGVectorStore prefixes "data_"
DOCSTORE_TABLE = "hiqa_docstore"
INDEX_STORE_TABLE = "hiqa_index_store"
# 1: the routes' tables; 2: + the chunk graph's (a format-1 database gets them from the first
# writer that keeps a graph, see GRAPH_SCHEMA); 3: BM25 postings by integer term and node row
# (``hiqa_terms`` holds each term's id and document frequency; see ``migrate_postings``); 4: the
# keyword route's postings in a narrow table (``hiqa_keywords``, read from its index alone) and
# each term's largest tf and smallest node length (the BM25 top-k's bounds; see
# ``migrate_keywords``).
STORE_FORMAT = 4
POSTINGS_FORMAT = 3
# pg_advisory_lock key held (for its session) by a bulk load that deferred the HNSW index:
# a writer that finds the index missing builds it only when no bulk load holds this lock.
BULK_LOCK = 0x68697162
# pg_advisory_xact_lock key serialising the writers of one database ("hiqa" in ASCII).
WRITE_LOCK = 0x68697161
# pg_advisory_lock key held while a process creates the pack's tables: writers started at once
# on an empty database (shards on several machines) would otherwise race CREATE TABLE IF NOT
# EXISTS, which is not safe against a concurrent creation of the same table.
SCHEMA_LOCK = 0x68697163
BM25_K1, BM25_B = 1.5, 0.75  # bm25s.BM25 defaults (method "lucene")


SCHEMA = [
    """CREATE TABLE IF NOT EXISTS hiqa_pack (
        id int PRIMARY KEY CHECK (id = 1),
        format int NOT NULL,
        config jsonb NOT NULL,
        embed_model text NOT NULL,
        embed_dim int NOT NULL,
        index_id text NOT NULL,
        node_count bigint NOT NULL DEFAULT 0,
        total_length bigint NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL DEFAULT now())""",
    """CREATE TABLE IF NOT EXISTS hiqa_documents (
        ref_doc_id text PRIMARY KEY,
        document_id text NOT NULL,
        title text NOT NULL DEFAULT '',
        doc_hash text NOT NULL,
        file_size bigint,
        file_mtime_ns bigint,
        pages int NOT NULL,
        node_count int NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS hiqa_documents_document_id ON hiqa_documents (document_id)",
    """CREATE TABLE IF NOT EXISTS hiqa_nodes (
        node_id text PRIMARY KEY,
        ref_doc_id text NOT NULL REFERENCES hiqa_documents (ref_doc_id) ON DELETE CASCADE,
        position int,
        keywords text[] NOT NULL,
        title_keywords text[] NOT NULL,
        length int NOT NULL,
        node_row int UNIQUE,
        term_ids int[])""",
    "CREATE INDEX IF NOT EXISTS hiqa_nodes_ref_doc ON hiqa_nodes (ref_doc_id)",
    "CREATE SEQUENCE IF NOT EXISTS hiqa_node_rows AS int",
]

# Format 3's BM25 tables: the vocabulary (a term's id and document frequency, kept by every
# write) and one narrow row per (term, node): 16 bytes of data instead of two texts. A node's
# term ids are kept on its hiqa_nodes row, so removing it finds its postings by key. A term's
# ``max_tf`` and ``min_length`` (over every posting it ever had: a removal leaves them, still
# bounds) bound what one of its postings adds to a score (see ROUTES_SQL).
POSTINGS_SCHEMA = [
    # Half-full pages: each batch's document-frequency updates stay on their page (HOT updates,
    # no new index entries).
    """CREATE TABLE IF NOT EXISTS hiqa_terms (
        term_id int PRIMARY KEY,
        term text NOT NULL UNIQUE,
        df int NOT NULL,
        max_tf int NOT NULL DEFAULT 0,
        min_length int NOT NULL DEFAULT 2147483647) WITH (fillfactor = 50)""",
    "CREATE SEQUENCE IF NOT EXISTS hiqa_term_ids AS int",
    """CREATE TABLE IF NOT EXISTS hiqa_postings (
        term_id int NOT NULL,
        node_row int NOT NULL,
        length int NOT NULL,
        tf smallint NOT NULL,
        PRIMARY KEY (term_id, node_row) INCLUDE (length, tf))""",
]
SCHEMA += POSTINGS_SCHEMA
# Format 4's keyword postings: one row per (critical keyword, node), whether the keyword is also
# one of the node's document title's, all in the primary key's index (an index-only scan
# counts |C| and breaks ties by node id without reading hiqa_nodes).
KEYWORDS_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS hiqa_keywords (
        keyword text NOT NULL,
        node_id text NOT NULL,
        in_title bool NOT NULL,
        PRIMARY KEY (keyword, node_id) INCLUDE (in_title))""",
]
SCHEMA += KEYWORDS_SCHEMA
SCHEMA += [
    # PGVectorStore indexes its rows by metadata ref_doc_id only; replacing and deleting go by node id.
    f"CREATE INDEX IF NOT EXISTS data_{VECTOR_TABLE}_node_id ON data_{VECTOR_TABLE} (node_id)",
]

# The chunk graph (IIER's Chunk-Interaction Graph), when the pack keeps one: its settings and a
# generation bumped by every write (a process reloads its copy when it changed), one row per
# chunk (its row in the graph, what the graph keeps of it, its semantic top-k for incremental
# updates; vectors stay in the vector table) and one row per edge and kind.
GRAPH_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS hiqa_graph (
        id int PRIMARY KEY CHECK (id = 1),
        generation bigint NOT NULL,
        node_count int NOT NULL,
        keyword_threshold int,
        settings jsonb NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS hiqa_graph_nodes (
        node_id text PRIMARY KEY,
        graph_row int NOT NULL,
        document_id text,
        position int,
        keywords text[] NOT NULL,
        title_keywords text[] NOT NULL,
        knn_rows int[] NOT NULL,
        knn_sims real[] NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS hiqa_graph_edges (
        u text NOT NULL,
        v text NOT NULL,
        kind text NOT NULL CHECK (kind IN ('structural', 'semantic', 'keyword')),
        weight float8 NOT NULL,
        PRIMARY KEY (u, v, kind))""",
]
SCHEMA += GRAPH_SCHEMA

# |C| per node: the query's keywords the node holds, and those of them that are also keywords
# of its document title (counted document_keyword_weight times in all: ``:extra`` more), from
# the keyword postings' index alone (keywords, query keywords and title keywords hold no
# repeats; ``:tw`` is a subset of ``:kw``).
_KEYWORD_COUNTS = """
SELECT p.node_id, count(*) + CAST(:extra AS float8)
       * count(*) FILTER (WHERE p.in_title AND p.keyword = ANY(CAST(:tw AS text[]))) AS score
FROM hiqa_keywords p WHERE p.keyword = ANY(CAST(:kw AS text[])) {restrict}
GROUP BY p.node_id"""

# Okapi BM25 as bm25s scores it (Lucene IDF log(1 + (N - df + 0.5) / (df + 0.5)), term
# component tf / (tf + k1 (1 - b + b dl / avgdl)), a query term counted as often as it occurs),
# with the document frequencies kept in hiqa_terms (always the whole collection's). What does
# not depend on the posting is computed once per query term: w = qtf * IDF, ka = k1 (1 - b),
# kb = k1 b / avgdl, so a posting adds w tf / (tf + ka + kb dl); at most
# ub = w max_tf / (max_tf + ka + kb min_length), the term's bound (a little above it, so that
# rounding never makes a bound smaller than a score). ka and kb are float8 (a literal such as 1.5
# is a numeric in SQL, and numeric arithmetic on every posting cost a third of the statement).
_BM25_TERMS_AND_STATS = f"""
q AS (SELECT t AS term, count(*) AS qtf FROM unnest(CAST(:terms AS text[])) t GROUP BY t),
stats AS (SELECT node_count::float8 AS n, total_length::float8 / greatest(node_count, 1) AS avgdl
          FROM hiqa_pack WHERE id = 1),
qt AS MATERIALIZED (
  SELECT term_id, df, w, ka, kb, w * max_tf / (max_tf + ka + kb * min_length) * (1 + 1e-9) AS ub FROM (
    SELECT h.term_id, h.df, h.max_tf, h.min_length, q.qtf * ln(1 + (stats.n - h.df + 0.5) / (h.df + 0.5)) AS w,
           CAST({BM25_K1 * (1 - BM25_B)!r} AS float8) AS ka, CAST({BM25_K1 * BM25_B!r} AS float8) / stats.avgdl AS kb
    FROM q JOIN hiqa_terms h USING (term) CROSS JOIN stats WHERE h.df > 0) t)"""
_BM25_TERM = "qt.w * p.tf / (p.tf + qt.ka + qt.kb * p.length)"
_BM25_SUM = f"sum({_BM25_TERM})"

# BM25's exact top :n without summing every posting of the question's common terms (MaxScore,
# Turtle and Flood, "Query evaluation: strategies and optimizations", 1995): the postings of
# the rarest terms (``rare``: the rarest, and the next ones while their postings total at most
# ``:rare_postings``, RARE_POSTINGS by default; 5,000 was the fastest of 0 to 60,000 at a
# million synthetic nodes) give partial scores, whose :n-th best, theta0, is at most the :n-th
# best full score. The commonest other terms whose bounds add up to less than theta0 (``skip``) cannot
# bring a node into the top :n on their own, so only the other terms' postings are read
# (``partial``); a node read there is a candidate unless even its bound (partial score + the
# skipped terms' bounds) stays under the :n-th best partial score. Nodes left out score less
# than the :n-th best: the top :n and the ties at its cut are those of summing every posting.
# The candidates are completed with their postings of the skipped terms in two rounds, each
# term read whole and joined to the candidates by hash when it has at most ``:probe_postings``
# postings a candidate (``scan``, ``scan2``: one pass in index order), else looked up by
# primary key for each candidate left (``probe``). The first round reads every skipped term
# but the commonest; a candidate is then dropped when its score so far plus the bounds of the
# terms not yet read stays under the :n-th best partial score (``reach``: at a million
# synthetic nodes, 20,000 to 90,000 candidates become a few hundred to a few thousand), so the
# commonest term is looked up for those few instead of read whole; ``reach2`` drops again
# before the lookups. One lookup per candidate and skipped term (the first version) was three
# quarters of the statement.
RARE_POSTINGS = 5000


def _completion_round(read: str, candidates: str, unread: str, reach: str) -> str:
    """The CTEs of one round of BM25's completion: the postings of the terms ``read`` joined to
    the ``candidates`` (``{read}_scores``), and the candidates with them added that can still
    reach the :n-th best partial score with the bounds of the ``unread`` terms (``reach``)."""
    return f"""{read}_scores AS MATERIALIZED (
  SELECT p.node_row, {_BM25_SUM} AS score FROM {read} qt JOIN hiqa_postings p USING (term_id)
  WHERE p.node_row IN (SELECT node_row FROM {candidates}) GROUP BY p.node_row),
{reach} AS MATERIALIZED (
  SELECT c.node_row, c.score + coalesce(s.score, 0) AS score FROM {candidates} c LEFT JOIN {read}_scores s USING (node_row)
  WHERE c.score + coalesce(s.score, 0) >= (SELECT t FROM theta) - coalesce((SELECT sum(ub) FROM {unread}), 0))"""


# A primary-key lookup costs about as much as reading this many postings in index order
# (measured at a million synthetic nodes: 3, 8 and 20 within noise of each other; 8 the best p95).
PROBE_POSTINGS = 8
_BM25_TOP = f"""
ranked AS MATERIALIZED (
  SELECT qt.*, sum(df) OVER (ORDER BY df, term_id) AS df_cum, row_number() OVER (ORDER BY df, term_id) AS i FROM qt),
rare AS MATERIALIZED (
  SELECT p.node_row, {_BM25_SUM} AS score FROM ranked qt JOIN hiqa_postings p USING (term_id)
  WHERE qt.i = 1 OR qt.df_cum <= :rare_postings GROUP BY p.node_row),
theta0 AS MATERIALIZED (SELECT coalesce((SELECT score FROM rare ORDER BY score DESC OFFSET greatest(:n - 1, 0) LIMIT 1), 0) AS t),
skip AS MATERIALIZED (
  SELECT * FROM (SELECT qt.*, sum(ub) OVER (ORDER BY ub, term_id) AS ub_cum FROM ranked qt
                 WHERE NOT (qt.i = 1 OR qt.df_cum <= :rare_postings)) s
  WHERE ub_cum < (SELECT t FROM theta0)),
partial AS MATERIALIZED (
  SELECT node_row, sum(score) AS score FROM (
    SELECT node_row, score FROM rare
    UNION ALL
    SELECT p.node_row, {_BM25_TERM} FROM ranked qt JOIN hiqa_postings p USING (term_id)
    WHERE NOT (qt.i = 1 OR qt.df_cum <= :rare_postings) AND qt.term_id NOT IN (SELECT term_id FROM skip)) x
  GROUP BY node_row),
theta AS MATERIALIZED (
  SELECT coalesce((SELECT score FROM partial ORDER BY score DESC OFFSET greatest(:n - 1, 0) LIMIT 1), 0) AS t),
cand AS MATERIALIZED (
  SELECT node_row, score FROM partial c WHERE c.score >= (SELECT t FROM theta) - coalesce((SELECT sum(ub) FROM skip), 0)),
scan AS MATERIALIZED (
  SELECT * FROM skip WHERE df <= :probe_postings * (SELECT count(*) FROM cand)
  AND term_id <> (SELECT term_id FROM skip ORDER BY df DESC, term_id LIMIT 1)),
later AS MATERIALIZED (SELECT * FROM skip WHERE term_id NOT IN (SELECT term_id FROM scan)),
{_completion_round("scan", "cand", "later", "reach")},
scan2 AS MATERIALIZED (SELECT * FROM later WHERE df <= :probe_postings * (SELECT count(*) FROM reach)),
probe AS MATERIALIZED (SELECT * FROM later WHERE term_id NOT IN (SELECT term_id FROM scan2)),
{_completion_round("scan2", "reach", "probe", "reach2")},
scored AS MATERIALIZED (
  SELECT c.node_row, c.score + coalesce((
    SELECT {_BM25_SUM} FROM probe qt JOIN hiqa_postings p ON p.term_id = qt.term_id AND p.node_row = c.node_row), 0) AS score
  FROM reach2 c),
top AS MATERIALIZED (SELECT node_row, score FROM scored WHERE score > 0 ORDER BY score DESC FETCH FIRST :n ROWS WITH TIES),
b AS MATERIALIZED (
  SELECT (SELECT node_id FROM hiqa_nodes nd WHERE nd.node_row = t.node_row) AS node_id, t.score FROM top t
  ORDER BY t.score DESC, 1 LIMIT :n)"""

# pgvector's HNSW top :n (cosine) of the question's vector.
_VECTOR_TOP = f"""
v AS MATERIALIZED (
  SELECT node_id, 1 - (embedding <=> CAST(:qvec AS vector)) AS score FROM data_{VECTOR_TABLE}
  WHERE CAST(:use_vector AS bool) ORDER BY embedding <=> CAST(:qvec AS vector) LIMIT :n)"""
# |C| of given candidates (``{candidates}``: a CTE of node ids), probing the keyword postings'
# primary key for each candidate (one descent a query keyword) rather than reading every
# posting of the query's keywords (a year is a keyword of one node in 25): the planner, which
# cannot know how many postings a keyword has, joined those otherwise.
_CANDIDATE_KEYWORD_COUNTS = """
SELECT c.node_id, s.score FROM {candidates} c CROSS JOIN LATERAL (
  SELECT count(*) + CAST(:extra AS float8)
         * count(*) FILTER (WHERE p.in_title AND p.keyword = ANY(CAST(:tw AS text[]))) AS score
  FROM hiqa_keywords p WHERE p.keyword = ANY(CAST(:kw AS text[])) AND p.node_id = c.node_id) s
WHERE s.score > 0"""

# The same rows as ROUTES_SQL in three statements that share nothing, sent at once on three
# connections (the server runs them in three processes, so a question waits for the slowest
# route rather than for the sum): the vector route with |C| of its candidates, BM25 with |C| of
# its candidates, and the keyword route's top :n. A node two of them return gets the same |C|
# from each.
VECTOR_ROUTE_SQL = f"""
WITH {_VECTOR_TOP}
SELECT 'v', node_id, score FROM v
UNION ALL SELECT 'k', node_id, score FROM ({_CANDIDATE_KEYWORD_COUNTS.format(candidates="v")}) kv
"""
BM25_ROUTE_SQL = f"""
WITH {_BM25_TERMS_AND_STATS},
{_BM25_TOP}
SELECT 'b', node_id, score FROM b
UNION ALL SELECT 'k', node_id, score FROM ({_CANDIDATE_KEYWORD_COUNTS.format(candidates="b")}) kb
"""
# The keyword route's top :n without counting every posting of one common keyword (a year is a
# keyword of one node in 25): a node holding only the commonest keyword ``big`` (more than
# ``:few_postings`` postings, the others fewer) scores 1, or 1 + :extra where its title holds
# it too, so only the first :n such nodes of each kind by node id can reach the top :n (the
# first :n have its score or more, and come first at a tie). The candidates are every node of
# the other keywords and those first :n of ``big``'s two kinds; their |C| is counted by primary
# key. With no common keyword or two, every posting is counted.
KEYWORD_FEW_POSTINGS = 2000
_KEYWORD_TOP = f"""
kq AS MATERIALIZED (
  SELECT q.kw, (SELECT count(*) FROM (SELECT 1 FROM hiqa_keywords p WHERE p.keyword = q.kw LIMIT :few_postings + 1) x) AS c
  FROM unnest(CAST(:kw AS text[])) AS q(kw)),
big AS MATERIALIZED (SELECT kw FROM kq WHERE c > :few_postings),
one_big AS MATERIALIZED (SELECT count(*) = 1 AS yes FROM big),
kcand AS MATERIALIZED (
  SELECT p.node_id FROM hiqa_keywords p
  WHERE (SELECT yes FROM one_big) AND p.keyword = ANY(ARRAY(SELECT kw FROM kq WHERE c <= :few_postings))
  UNION
  (SELECT p.node_id FROM hiqa_keywords p WHERE (SELECT yes FROM one_big) AND p.keyword = (SELECT kw FROM big) AND p.in_title
   ORDER BY p.node_id COLLATE "C" LIMIT :n)
  UNION
  (SELECT p.node_id FROM hiqa_keywords p WHERE (SELECT yes FROM one_big) AND p.keyword = (SELECT kw FROM big) AND NOT p.in_title
   ORDER BY p.node_id COLLATE "C" LIMIT :n)),
k AS MATERIALIZED (
  SELECT c.node_id, s.score FROM kcand c CROSS JOIN LATERAL (
    SELECT count(*) + CAST(:extra AS float8)
           * count(*) FILTER (WHERE p.in_title AND p.keyword = ANY(CAST(:tw AS text[]))) AS score
    FROM hiqa_keywords p WHERE p.keyword = ANY(CAST(:kw AS text[])) AND p.node_id = c.node_id) s
  UNION ALL
  SELECT * FROM ({_KEYWORD_COUNTS.format(restrict="AND NOT (SELECT yes FROM one_big)")}) every),
kt AS (SELECT node_id FROM k ORDER BY score DESC, node_id COLLATE "C" LIMIT :n)"""
KEYWORD_ROUTE_SQL = f"""
WITH {_KEYWORD_TOP}
SELECT 'k', node_id, score FROM k WHERE node_id IN (SELECT node_id FROM kt)
"""

# The three routes of one question in one statement, the same rows as the three statements
# above: pgvector's HNSW top :n (cosine), BM25's top :n (ties at the cut broken by node id) and
# |C| of the keyword route's top :n plus of every node the other two returned (fusion reads |C|
# of the candidates only).
ROUTES_SQL = f"""
WITH {_VECTOR_TOP},
{_BM25_TERMS_AND_STATS},
{_BM25_TOP},
{_KEYWORD_TOP},
vb AS MATERIALIZED (SELECT node_id FROM v UNION SELECT node_id FROM b EXCEPT SELECT node_id FROM kt)
SELECT 'v', node_id, score FROM v
UNION ALL SELECT 'b', node_id, score FROM b
UNION ALL SELECT 'k', node_id, score FROM k WHERE node_id IN (SELECT node_id FROM kt)
UNION ALL SELECT 'k', node_id, score FROM ({_CANDIDATE_KEYWORD_COUNTS.format(candidates="vb")}) kvb
"""

# Every route's score of given nodes (the document focus ranks every node of the documents it
# focuses; BM25's document frequencies stay collection-wide), in one statement. A document's
# nodes are written in one batch, so their rows are one range: each query term's postings are
# read in the ranges of consecutive rows only (one a document), not the term's whole list.
WITHIN_SQL = f"""
WITH ids AS MATERIALIZED (
  SELECT node_id, (SELECT node_row FROM hiqa_nodes n WHERE n.node_id = i.node_id) AS node_row
  FROM unnest(CAST(:ids AS text[])) AS i(node_id)),
spans AS MATERIALIZED (
  SELECT min(node_row) AS lo, max(node_row) AS hi FROM (
    SELECT node_row, node_row - row_number() OVER (ORDER BY node_row) AS run FROM ids WHERE node_row IS NOT NULL) r
  GROUP BY run),
{_BM25_TERMS_AND_STATS}
SELECT 'v', ids.node_id, 1 - (v.embedding <=> CAST(:qvec AS vector))
  FROM ids JOIN data_{VECTOR_TABLE} v USING (node_id) WHERE CAST(:use_vector AS bool)
UNION ALL
SELECT 'b', ids.node_id, s.score FROM (
  SELECT p.node_row, {_BM25_SUM} AS score
  FROM qt CROSS JOIN spans JOIN hiqa_postings p ON p.term_id = qt.term_id AND p.node_row BETWEEN spans.lo AND spans.hi
  GROUP BY p.node_row) s JOIN ids USING (node_row) WHERE s.score > 0
UNION ALL
SELECT 'k', node_id, score FROM ({_KEYWORD_COUNTS.format(restrict="AND p.node_id IN (SELECT node_id FROM ids)")}) kc
"""

# |C| of every node holding one of the query's keywords (route_scores, calibration).
KEYWORD_SQL = _KEYWORD_COUNTS.format(restrict="")

SHAPE_SQL = "SELECT count(*), coalesce(avg(pages), 1) FROM hiqa_documents"
TITLES_SQL = "SELECT DISTINCT title FROM hiqa_documents WHERE title <> '' ORDER BY title"

# One document's nodes, in document order.
DOCUMENT_NODES_SQL = """
SELECT n.node_id FROM hiqa_nodes n JOIN hiqa_documents d USING (ref_doc_id)
WHERE d.document_id = :document_id ORDER BY n.position, n.node_id
"""


class BM25Tokenizer:
    """The tokens ``BM25Retriever`` indexes (``bm25s.tokenize`` with its stop words, token
    pattern and Snowball stemmer), so stored statistics score as the in-memory route does."""

    TOKEN_PATTERN = r"(?u)\b\w\w+\b"

    def __init__(self, language: str = "en") -> None:
        self.language = language
        self.stemmer = Stemmer.Stemmer("english")

    def documents(self, texts: Sequence[str]) -> List[List[str]]:
        """The BM25 terms of each text: stemmed, stop words left out.

        Args:
            texts: the node texts.

        Returns:
            One term list per text.
        """
        # bm25s (~0.3 s to import) loads when the PostgreSQL store tokenizes.
        import bm25s

        if not texts:
            return []
        tokens = bm25s.tokenize(
            list(texts), stopwords=self.language, stemmer=self.stemmer,
            token_pattern=self.TOKEN_PATTERN, return_ids=False, show_progress=False,
        )
        return [list(t) for t in tokens]

    def query(self, text: str) -> List[str]:
        """The BM25 terms of a question: stemmed, stop words kept (they are not in the index).

        Args:
            text: the question text.

        Returns:
            Its terms.
        """
        # bm25s (~0.3 s to import) loads when the PostgreSQL store tokenizes.
        import bm25s

        # As _BM25Route._query_tokens: no stop-word list (stop words are not in the index).
        tokens = bm25s.tokenize(
            [text], stemmer=self.stemmer, token_pattern=self.TOKEN_PATTERN, return_ids=False, show_progress=False
        )
        return list(tokens[0]) if tokens else []


def without_nul(value: Any) -> Any:
    """``value`` with NUL characters removed from every string: PostgreSQL's text and jsonb
    cannot hold them (PDF text sometimes does); nothing else is changed.

    Args:
        value: a JSON-able value.

    Returns:
        The value without NUL characters.
    """
    if isinstance(value, str):
        return value.replace("\x00", "") if "\x00" in value else value
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_nul(v) for v in value]
    return value


def copy_field(value: Any) -> str:
    """``value`` as a field of COPY's text format.

    Args:
        value: the value.

    Returns:
        Its text, with backslash, tab and newlines escaped.
    """
    return str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
