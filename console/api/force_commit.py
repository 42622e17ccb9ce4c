"""Placeholder: being written (issue 6)."""

from rest_framework.response import Response
from rest_framework.views import APIView


class ForceCommit(APIView):
    def post(self, request, table: str) -> Response:
        return Response({"error": "not yet"}, status=501)


class ForceCommitStatus(APIView):
    def get(self, request, job_id: str) -> Response:
        return Response({"error": "not yet"}, status=501)
