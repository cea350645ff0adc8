"""Several transformations as one, over whole documents: what a Ray batch must hold for the
transformations that read a document's other nodes.

LlamaIndex's ``RayIngestionPipeline`` turns its input into a Ray dataset and lets Ray Data cut
it into blocks and batches by row count, so a transformation that runs on nodes may see part
of a document. Most of the pack's transformations look at one node at a time (the parsers take
documents, the keyword extractor and the embedding one node each) and give the same nodes
however the rows are cut. Two read a document's other nodes: ``CascadingMetadataTransform``
writes an image node's view from the text around it, and ``ContextHeaderTransform`` summarises
a whole document. Given documents (rows that are never cut), ``DocumentChain`` runs the parser
and those transformations in one Ray task, so each sees every node of the documents it gets:

>>> from llama_index_hiqa import CascadingMetadataTransform, DocumentChain, LayoutMarkdownParser
>>> chain = DocumentChain(transformations=[LayoutMarkdownParser(), CascadingMetadataTransform()])
>>> len(chain.transformations)
2

and, with ``llama-index-ingestion-ray`` installed,
``RayTransformComponent(DocumentChain, transformations=[...])`` runs it on a cluster.
"""

from __future__ import annotations

from typing import Any, ClassVar, List, Sequence, Tuple

from llama_index.core.bridge.pydantic import Field
from llama_index.core.schema import BaseNode, TransformComponent

from llama_index_hiqa.component_dict import PartsRoundTrip


class DocumentChain(PartsRoundTrip, TransformComponent):
    """Runs ``transformations`` one after another on the same batch (``nodes`` in, nodes out),
    as ``IngestionPipeline`` runs its list, but as one transformation that can be sent to a worker.

    Its transformations are a part: ``to_dict`` records them by class name, ``from_dict`` takes
    them back (``from_dict(data, transformations=[...])``); pickled, the chain goes whole.
    """

    part_names: ClassVar[Tuple[str, ...]] = ("transformations",)

    transformations: List[TransformComponent] = Field(
        description="The transformations, in order; the first usually a parser taking documents."
    )

    @classmethod
    def class_name(cls) -> str:
        return "DocumentChain"

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        for transformation in self.transformations:
            nodes = transformation(nodes, **kwargs)
        return nodes

    async def acall(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        """As calling the chain, each transformation through its ``acall``.

        Args:
            nodes: the documents or nodes of the batch.
            **kwargs: passed on to every transformation (``show_progress``).

        Returns:
            The last transformation's nodes.
        """
        for transformation in self.transformations:
            nodes = await transformation.acall(nodes, **kwargs)
        return nodes
