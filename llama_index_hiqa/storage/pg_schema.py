"""The PostgreSQL store's tables, the routes' queries, and the rows a write puts in them.

See :mod:`llama_index_hiqa.storage.postgres` for what each table holds and why writes are one
transaction. BM25 is Okapi BM25 as bm25s scores it ("lucene" method: IDF
log(1 + (N - df + 0.5) / (df + 0.5)), term component tf / (tf + k1 (1 - b + b dl / avgdl)),
k1 = 1.5, b = 0.75) over the tokens ``BM25Retriever`` indexes, computed by one SQL query over
the postings table.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

from llama_index.core.schema import BaseNode

VECTOR_TABLE = "hiqa_vectors"  # PGVectorStore prefixes "data_"
DOCSTORE_TABLE = "hiqa_docstore"
INDEX_STORE_TABLE = "hiqa_index_store"
# 1: the routes' tables; 2: + the chunk graph's (a format-1 database gets them from the first
# writer that keeps a graph, see GRAPH_SCHEMA).
STORE_FORMAT = 2
# pg_advisory_xact_lock key serialising the writers of one database ("hiqa" in ASCII).
WRITE_LOCK = 0x68697161
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
        length int NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS hiqa_nodes_ref_doc ON hiqa_nodes (ref_doc_id)",
    "CREATE INDEX IF NOT EXISTS hiqa_nodes_keywords ON hiqa_nodes USING gin (keywords)",
    """CREATE TABLE IF NOT EXISTS hiqa_postings (
        term text NOT NULL,
        node_id text NOT NULL,
        ref_doc_id text NOT NULL,
        tf int NOT NULL,
        length int NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS hiqa_postings_term ON hiqa_postings (term) INCLUDE (node_id, tf, length)",
    "CREATE INDEX IF NOT EXISTS hiqa_postings_ref_doc ON hiqa_postings (ref_doc_id)",
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

# |C| per node in one query: the query's keywords the node holds, and those of them that are
# also keywords of its document title (counted document_keyword_weight times in all).
KEYWORD_SQL = """
SELECT node_id,
       cardinality(ARRAY(SELECT unnest(keywords) INTERSECT SELECT unnest(CAST(:q AS text[])))) AS held,
       cardinality(ARRAY(SELECT unnest(keywords) INTERSECT SELECT unnest(title_keywords)
                         INTERSECT SELECT unnest(CAST(:t AS text[])))) AS in_title
FROM hiqa_nodes WHERE keywords && CAST(:q AS text[])
"""

# Okapi BM25 as bm25s scores it (Lucene IDF log(1 + (N - df + 0.5) / (df + 0.5)), term
# component tf / (tf + k1 (1 - b + b dl / avgdl)), a query term counted as often as it occurs).
# The query's terms, the collection's statistics and the score are one text for both queries
# below; the document frequencies are always the whole collection's.
_BM25_TERMS_AND_STATS = """
q AS (SELECT t AS term, count(*) AS qtf FROM unnest(CAST(:terms AS text[])) t GROUP BY t),
stats AS (SELECT node_count::float8 AS n, total_length::float8 / greatest(node_count, 1) AS avgdl
          FROM hiqa_pack WHERE id = 1)"""
_BM25_SCORE = f"""
SELECT p.node_id,
       sum(q.qtf * ln(1 + (stats.n - df.df + 0.5) / (df.df + 0.5))
           * p.tf / (p.tf + {BM25_K1} * (1 - {BM25_B} + {BM25_B} * p.length / stats.avgdl))) AS score
FROM p JOIN q USING (term) JOIN df USING (term) CROSS JOIN stats
GROUP BY p.node_id"""

BM25_SQL = f"""
WITH {_BM25_TERMS_AND_STATS},
p AS MATERIALIZED (SELECT term, node_id, tf, length FROM hiqa_postings WHERE term = ANY(CAST(:terms AS text[]))),
df AS (SELECT term, count(*)::float8 AS df FROM p GROUP BY term)
{_BM25_SCORE} ORDER BY score DESC, p.node_id LIMIT :n
"""

SHAPE_SQL = "SELECT count(*), coalesce(avg(pages), 1) FROM hiqa_documents"
TITLES_SQL = "SELECT DISTINCT title FROM hiqa_documents WHERE title <> '' ORDER BY title"

# One document's nodes, and the vector and BM25 scores of given nodes (the document focus
# ranks every node of the best document; BM25's document frequencies stay collection-wide).
DOCUMENT_NODES_SQL = """
SELECT n.node_id FROM hiqa_nodes n JOIN hiqa_documents d USING (ref_doc_id)
WHERE d.document_id = :document_id ORDER BY n.position, n.node_id
"""

BM25_WITHIN_SQL = f"""
WITH {_BM25_TERMS_AND_STATS},
df AS (SELECT term, count(*)::float8 AS df FROM hiqa_postings
       WHERE term = ANY(CAST(:terms AS text[])) GROUP BY term),
p AS (SELECT term, node_id, tf, length FROM hiqa_postings
      WHERE term = ANY(CAST(:terms AS text[])) AND node_id = ANY(CAST(:ids AS text[])))
{_BM25_SCORE}
"""

VECTOR_WITHIN_SQL = f"""
SELECT node_id, 1 - (embedding <=> CAST(:q AS vector)) FROM data_{VECTOR_TABLE}
WHERE node_id = ANY(CAST(:ids AS text[]))
"""


class BM25Tokenizer:
    """The tokens ``BM25Retriever`` indexes (``bm25s.tokenize`` with its stop words, token
    pattern and Snowball stemmer), so stored statistics score as the in-memory route does."""

    TOKEN_PATTERN = r"(?u)\b\w\w+\b"

    def __init__(self, language: str = "en") -> None:
        import Stemmer

        self.language = language
        self.stemmer = Stemmer.Stemmer("english")

    def documents(self, texts: Sequence[str]) -> List[List[str]]:
        import bm25s

        if not texts:
            return []
        tokens = bm25s.tokenize(
            list(texts), stopwords=self.language, stemmer=self.stemmer,
            token_pattern=self.TOKEN_PATTERN, return_ids=False, show_progress=False,
        )
        return [list(t) for t in tokens]

    def query(self, text: str) -> List[str]:
        import bm25s

        # As _BM25Route._query_tokens: no stop-word list (stop words are not in the index).
        tokens = bm25s.tokenize(
            [text], stemmer=self.stemmer, token_pattern=self.TOKEN_PATTERN, return_ids=False, show_progress=False
        )
        return list(tokens[0]) if tokens else []


def nodes_table() -> Any:
    """``hiqa_nodes`` for SQLAlchemy Core inserts (batched into multi-row INSERTs)."""
    from sqlalchemy import Column, Integer, MetaData, Table, Text
    from sqlalchemy.dialects.postgresql import ARRAY

    return Table(
        "hiqa_nodes", MetaData(),
        Column("node_id", Text, primary_key=True), Column("ref_doc_id", Text), Column("position", Integer),
        Column("keywords", ARRAY(Text)), Column("title_keywords", ARRAY(Text)), Column("length", Integer),
    )


NODES_TABLE = nodes_table()


def without_nul(value: Any) -> Any:
    """``value`` with NUL characters removed from every string: PostgreSQL's text and jsonb
    cannot hold them (PDF text sometimes does); nothing else is changed."""
    if isinstance(value, str):
        return value.replace("\x00", "") if "\x00" in value else value
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_nul(v) for v in value]
    return value


def node_row(node: BaseNode, tokens: List[str], keywords: Tuple[List[str], List[str]]) -> Dict[str, Any]:
    from llama_index_hiqa import schema

    return {
        "node_id": node.node_id, "ref_doc_id": node.ref_doc_id, "position": schema.get_position(node),
        "keywords": without_nul(list(keywords[0])), "title_keywords": without_nul(list(keywords[1])),
        "length": len(tokens),
    }


def copy_field(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def copy_postings(conn: Any, nodes: Sequence[BaseNode], tokens: Sequence[List[str]]) -> None:
    """The batch's postings with COPY, inside the caller's transaction (tens of rows a node)."""
    import io
    from collections import Counter

    buffer = io.StringIO()
    for node, node_tokens in zip(nodes, tokens):
        node_id, ref, length = copy_field(node.node_id), copy_field(node.ref_doc_id), len(node_tokens)
        for term, tf in Counter(node_tokens).items():
            buffer.write(f"{copy_field(term)}\t{node_id}\t{ref}\t{tf}\t{length}\n")
    buffer.seek(0)
    with conn.connection.cursor() as cursor:  # the DBAPI connection of this transaction
        cursor.copy_expert("COPY hiqa_postings (term, node_id, ref_doc_id, tf, length) FROM STDIN", buffer)
