from django.conf import settings
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import APIRootView, DefaultRouter

from scheduling.api.bulk_action_views import BulkActionViewSet
from scheduling.api.endpoint_views import EndpointViewSet
from scheduling.api.event_views import EventViewSet, SubscriptionViewSet
from scheduling.api.message_views import MessageViewSet
from scheduling.api.notification_views import NotificationRouteViewSet
from scheduling.api.schedule_views import ScheduleViewSet
from scheduling.api.team_views import (
    ApiKeyViewSet,
    AuditViewSet,
    InvitationViewSet,
    OwnApiKeyViewSet,
    TeamViewSet,
)


class ApiRoot(APIRootView):
    """``GET /api/``: the routes, and the release that answers (``version``, the schema's
    info.version too): during a rollout a caller sees which web served it."""

    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        response.data = {"version": settings.PLATFORM_VERSION, **response.data}
        return response


class Router(DefaultRouter):
    APIRootView = ApiRoot


router = Router()
router.register("endpoints", EndpointViewSet, basename="endpoint")
router.register("messages", MessageViewSet, basename="message")
router.register("schedules", ScheduleViewSet, basename="schedule")
router.register("teams", TeamViewSet, basename="team")
router.register("keys/mine", OwnApiKeyViewSet, basename="ownkey")  # before keys/<prefix>
router.register("keys", ApiKeyViewSet, basename="apikey")
router.register("invitations", InvitationViewSet, basename="invitation")
router.register("audit", AuditViewSet, basename="audit")
router.register("bulk-actions", BulkActionViewSet, basename="bulkaction")
router.register("subscriptions", SubscriptionViewSet, basename="subscription")
router.register("events", EventViewSet, basename="event")
router.register("notifications", NotificationRouteViewSet, basename="notificationroute")

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("", include(router.urls)),
]
