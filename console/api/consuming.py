"""Placeholder: being written (issue 6)."""

from rest_framework.response import Response
from rest_framework.views import APIView


class ConsumingSegmentsInfo(APIView):
    def get(self, request, table: str) -> Response:
        return Response({"error": "not yet"}, status=501)
